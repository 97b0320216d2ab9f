"""Player ids on the command line, resolved and loaded for ``eval``, ``play``, ``gate`` and
``replay``.

A player is ``snap:<id>`` (or the bare 16-hex id) from the run's snapshot store, ``latest``
(the run's newest snapshot by the iteration in its spec), ``champion`` (the pool's champion,
``ladder/pool.json``) or ``scripted:<name>`` (``shared.scripted.SCRIPTED_PLAYERS``), any of
them optionally searching at its choice decisions: ``<player>+search:N[:D]``
(``shared.search.spec``; ``latest+search:8`` is the newest snapshot searching 8 candidates).
"""

from __future__ import annotations

from pathlib import Path

from shared.messages import SNAPSHOT_PREFIX, snapshot_of
from shared.run_dir import RunDir
from shared.search.spec import split_search, with_search

LATEST, CHAMPION = "latest", "champion"
DEFAULT_OPPONENT = "scripted:random_legal"
"""B of ``eval`` and ``play`` when not given: the strength measurement's first anchor."""


def normalise(player: str) -> str:
    """A bare 16-hex snapshot id becomes ``snap:<id>``; anything else is kept."""
    if len(player) == 16 and all(c in "0123456789abcdef" for c in player):
        return SNAPSHOT_PREFIX + player
    return player


def newest_snapshot(cfg) -> str | None:
    """``snap:<id>`` of the run's newest snapshot (highest iteration, then env steps, then id),
    None when it has none. Unreadable specs are skipped."""
    import msgspec

    from services.checkpoint.snapshots import SPEC, SnapshotStore

    store = SnapshotStore(RunDir(Path(cfg.runs_dir) / cfg.run_name).snapshots)
    best = None
    for sid in store.ids():
        try:
            spec = msgspec.json.decode((store.root / sid / SPEC).read_bytes())
        except (OSError, msgspec.DecodeError):
            continue
        key = (int(spec.get("iteration", -1)), int(spec.get("env_steps", -1)), sid)
        best = max(best, key) if best else key
    return None if best is None else SNAPSHOT_PREFIX + best[2]


def resolve(player: str, cfg) -> str:
    """``latest`` / ``champion`` as a ``snap:<id>``, a bare id normalised, a search suffix kept
    (canonical: the default depth dropped). Raises ValueError naming what is missing, and for a
    young run without a champion, the snapshot to play instead."""
    from shared.evaluation import GREEDY_MARK, split_greedy

    player, greedy = split_greedy(player)
    if greedy:  # latest+greedy, champion+greedy, a bare id+greedy
        return resolve(player, cfg) + GREEDY_MARK
    base, search = split_search(player)
    root = Path(cfg.runs_dir) / cfg.run_name
    if base == CHAMPION:
        from services.ladder.pool import PoolState

        champion = PoolState.for_run(cfg.runs_dir, cfg.run_name, cfg.ladder).champion
        if champion is None:
            newest = newest_snapshot(cfg)
            instead = (f"; play its newest snapshot with `latest` ({newest})" if newest
                       else "; it has no snapshot yet either (the learner writes its first at iteration "
                       f"{cfg.evaluation.strength.every_iterations}, evaluation.strength.every_iterations)")
            raise ValueError(f"run {cfg.run_name!r} has no champion yet ({RunDir(root).pool} names none){instead}")
        return with_search(champion, search)
    if base == LATEST:
        newest = newest_snapshot(cfg)
        if newest is None:
            raise ValueError(f"run {cfg.run_name!r} has no snapshot under {RunDir(root).snapshots}; `latest` needs one")
        return with_search(newest, search)
    return with_search(normalise(base), search)


class LocalPlayers:
    """Players of one run, snapshots read from its store (verified against their ids), loaded
    once each. A searching player shares its base's loaded weights."""

    def __init__(self, cfg):
        self.cfg, self._facts, self._loaded = cfg, None, {}

    def get(self, player: str):
        """The player for a resolved id. Raises ValueError naming the id and the known ones,
        OSError for a snapshot that cannot be read, ``SnapshotRefused`` / ``SearchRefused``
        (ValueErrors) for one this run cannot play."""
        from services.checkpoint.snapshots import SnapshotStore
        from services.evaluator.players import ScriptedPlayer, load_snapshot_player, run_facts
        from shared.evaluation import check_player

        problem = check_player(player)
        if problem:
            raise ValueError(problem)
        if player in self._loaded:
            return self._loaded[player]
        from services.evaluator.players import GreedyPlayer
        from shared.evaluation import split_greedy

        base_id, greedy = split_greedy(player)
        if greedy:
            self._loaded[player] = GreedyPlayer(player, self.get(base_id))
            return self._loaded[player]
        base_id, search = split_search(player)
        if search is not None:
            from services.evaluator.searched import SearchedPlayer
            from shared.evaluation import eval_env_config

            p = SearchedPlayer(player, self.get(base_id), search, eval_env_config(self.cfg.env))
        elif snapshot_of(player) is None:
            p = ScriptedPlayer(player, self.cfg.ladder.random_legal_noop_prob)
        else:
            store = SnapshotStore(RunDir.of(self.cfg.runs_dir, self.cfg.run_name).snapshots)
            actor, spec = store.read(snapshot_of(player))
            if self._facts is None:
                self._facts = run_facts(self.cfg)
            p = load_snapshot_player(player, actor, spec, self.cfg, self._facts)
        self._loaded[player] = p
        return p


def load_player(player: str, players: LocalPlayers):
    """The player for an id (``LocalPlayers.get``). Raises ValueError naming the known ids."""
    try:
        return players.get(player)
    except ValueError as exc:
        raise ValueError(f"{exc}; a player may also be latest, champion, or any of them with +search:N "
                         "(or a snapshot with +greedy)") from None
