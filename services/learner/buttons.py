"""What the learner did with its ability buttons this iteration (``env.ability_buttons``).

Action ``n_grid_actions + k`` presses button k (``shared.envs.ObsSpec``); the rollout hands the
action to RoyaleGym's ``TileActionParser``, which turns it into the engine's button command
(``DeployCommand(hand_slot=HAND_SIZE + k)``). A press is counted where the learner chose it,
over the cells it acted on, whether or not the engine then took it (``deploy_status`` says).
"""

from __future__ import annotations

import numpy as np


def button_metrics(rect, spec) -> dict:
    """``policy/button_presses``: the learner's button actions over its acted cells of
    ``rect`` (``services.learner.rectangle.Rectangle``), and
    ``policy/button_presses_accepted``: those the engine accepted (``deploy_status`` 0).
    Empty for a spec without buttons (``spec.n_buttons`` 0), so such a run's rows are
    unchanged."""
    if not getattr(spec, "n_buttons", 0):
        return {}
    pressed = rect.acted & spec.is_button(rect.actions)
    accepted = pressed & rect.step_valid & (rect.deploy_status == 0)
    return {"policy/button_presses": int(np.count_nonzero(pressed)),
            "policy/button_presses_accepted": int(np.count_nonzero(accepted))}
