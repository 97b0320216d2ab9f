"""Search over engine snapshots: a player's decision found by trying candidate actions in a copy
of the battle (``lookahead``), and the player-id grammar that asks for it (``spec``)."""
