"""A simulation battle stepped with only what a scripted playout reads: the engine, the action
parser, the done conditions and each seat's mask when its bot asks for it.

``ClashParallelEnv.step`` does, besides the engine's step, work a simulation whose two seats are
played by scripted bots (``mask_only``) and whose rewards nobody reads throws away: the reward
(this project's potential-based terms, in exact fractions), both seats' masks on every decision
(the last decision's are never read), an all-zero observation per ``mask_only`` seat, the info
dicts and the observation builder's match memory; its ``reset`` from a snapshot also reloads that
memory and recomputes the calibration digest. Measured on the teacher's search
(docs/throughput.md, "The search's speed"), that was about a third of a simulation's time.

``FastSim`` drives the same env's parts directly, in the order ``ClashParallelEnv.step`` calls
them, so a simulation is the same battle decision for decision: the same commands (parsed from
the same state, blue's first), the same ``engine.step(commands, decision_ticks)``, the same
``termination.is_done`` / ``truncation.is_done`` calls on every decision (a step limit counts
them) and the episode's tick cap from the snapshot. A seat's observation is its mask entries
alone (``action_mask`` and ``mask_planes``, as ``ObsBuilder.mask_only`` writes them, without
the zero planes): what RoyaleGym's scripted bots read. Only for simulations whose seats are all
scripted and whose rewards are not kept (``Lookahead.simulate`` picks it);
tests/shared/test_search_sim.py checks it against the env's own step, battle for battle.
"""

from __future__ import annotations

import numpy as np


class FastSim:
    """``env`` (a ``ClashParallelEnv``, used for its engine and components only) as a simulation:
    ``reset(snapshot)``, then ``obs(team)`` (the mask entries of a seat's observation, built at
    most once a decision) and ``step(blue_action, red_action) -> (terminated, truncated)``;
    ``state`` is the battle's ``BattleState`` after the last call."""

    def __init__(self, env):
        self.env = env
        self.state = None
        self._obs: list = [None, None]
        self._max_ticks: int | None = None
        self._start_tick = 0
        self._ticks = 1
        self._plane_size = 0

    def reset(self, snapshot) -> None:
        """Load ``snapshot`` (a RoyaleGym ``Snapshot``, as ``ClashParallelEnv.snapshot`` returns,
        or its engine blob as bytes: no tick cap) and reset the done conditions on it, as
        ``ClashParallelEnv.reset(options={"snapshot": ...})`` does. Raises ValueError for a bad
        ``max_ticks`` on the snapshot (RoyaleGym's)."""
        from royalegym.state_mutator import check_max_ticks

        env = self.env
        raw = isinstance(snapshot, bytes)
        env.engine.load_state(snapshot if raw else snapshot.blob)
        state = env.engine.state()
        self._ticks = max(1, -(-env.decision_ms // state.tick_ms))
        self._max_ticks = None if raw else check_max_ticks(snapshot.max_ticks, "max_ticks")
        self._start_tick = state.tick
        env.termination.reset(state)
        if env.truncation is not None:
            env.truncation.reset(state)
        self.state, self._obs = state, [None, None]

    def obs(self, team: int) -> dict:
        """Seat ``team``'s (0 blue, 1 red) observation now, its mask entries alone: ``action_mask``
        (2305,) int8 and ``mask_planes`` (4, 32, 18) int8, a view of the same buffer."""
        got = self._obs[team]
        if got is None:
            env = self.env
            mask = env.action_parser.action_mask(self.state, team)
            got = self._entries(mask)
            self._obs[team] = got
        return got

    def _entries(self, mask):
        """The mask entries ``ObsBuilder._mask_entries`` writes (``action_mask``, ``mask_planes`` as
        a view of it), without its per-call dtype and size arithmetic; the builder's own
        ``mask_only`` for a builder with other mask keys (ability buttons) or none of these."""
        builder = self.env.obs_builder
        shape = getattr(builder, "mask_plane_shape", None)
        if shape is None or getattr(builder, "ability_buttons", 0) or mask.dtype != np.int8:
            return builder.mask_only(mask)
        n = self._plane_size or int(np.prod(shape))
        self._plane_size = n
        return {"action_mask": mask, "mask_planes": mask[1 : 1 + n].reshape(shape)}

    def step(self, blue: int, red: int) -> tuple[bool, bool]:
        """One decision with these actions (each in its seat's own frame); returns (terminated,
        truncated) as ``ClashParallelEnv.step`` reports them for either seat."""
        env, prev = self.env, self.state
        commands = []
        for team, action in ((0, blue), (1, red)):
            cmd = env.action_parser.parse(int(action), prev, team)
            if cmd is not None:
                commands.append(cmd)
        env.engine.step(commands, self._ticks)
        state = env.engine.state()
        self.state, self._obs = state, [None, None]
        terminated = bool(env.termination.is_done(state))
        truncated = env.truncation is not None and bool(env.truncation.is_done(state))
        capped = self._max_ticks is not None and state.tick - self._start_tick >= self._max_ticks
        return terminated, (truncated or capped) and not terminated
