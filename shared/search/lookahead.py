"""A flat lookahead over engine snapshots: every candidate action is played in a copy of the
battle, followed by a short playout, and scored by the board it leads to.

At a choice decision of the searching seat (more than the no-op legal) the battle is saved
(``ClashParallelEnv.snapshot()``: the engine's state and both seats' observation memory) and,
for each candidate, loaded into a second env built from the same ``EnvConfig`` (never the real
one: the real battle's engine, RNG streams and recorder are not touched). There the searching
seat plays the candidate, then ``depth`` decisions of a cheap playout policy (RoyaleGym's
``random``: ``RandomLegalOpponent(0.7)``), while the other seat plays as the battle's opponent
does (its own player, on its own simulation stream). The leaf is scored by ``board_value``.

Why this method (docs/design.md, "Search at play"): the probe of
/work/shared/reference/search-probe.md found that this naive search with no network beat
RoyaleGym's best scripted bot 29-11, with a random playout as well as with ``defend``; a
policy that cannot yet place cards still finds a good placement by trying a few. Candidates
come from the searching player itself (a snapshot's policy through Gumbel-top-k, so the first
candidate is a sample of the policy and a search whose candidates all tie plays exactly as the
policy would; a scripted player's own choice, the no-op and random legal plays).

Every candidate of one decision replays the same playout streams (common random numbers), so
the comparison between candidates is not drowned by the playout's own noise, and the chosen
action is a pure function of the saved battle, the players' weights and the searching seat's
stream (one uint64 drawn from it per choice decision).

A simulation whose two seats are scripted and whose rewards are not kept is stepped by
``shared.search.sim.FastSim`` (the same battle without the env's reward, observations and info:
docs/search.md, "Its speed against the engine's"); the others by the env's own step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

SEAT_NAMES = ("blue", "red")
CROWN_VALUE = 5000.0
"""Tower HP a crown is worth in ``board_value``: more than a princess tower's whole HP, so a
destroyed tower outweighs any amount of chip damage (the probe's scale)."""
WIN_VALUE = 1.0e6
"""``board_value`` of a battle the seat has won (minus for a loss): above any board."""
PLAYOUT_NOOP_PROB = 0.7
"""The playout policy's no-op probability: RoyaleGym's ladder ``random`` (RandomLegal(0.7))."""


def board_value(state, team: int) -> float:
    """How good ``state`` (a RoyaleGym ``BattleState``) is for ``team`` (0 blue, 1 red), in
    tower HP: own tower HP - enemy tower HP + ``CROWN_VALUE`` x (own crowns - enemy crowns),
    and +-``WIN_VALUE`` once the battle is over with a winner (0 added for a draw). The
    search-probe's leaf score, with the win made explicit."""
    me, them = state.players[team], state.players[1 - team]
    value = float(sum(me.tower_hp) - sum(them.tower_hp)) + CROWN_VALUE * (me.crowns - them.crowns)
    if state.game_over and int(state.winner) in (0, 1):
        value += WIN_VALUE if int(state.winner) == team else -WIN_VALUE
    return value


@dataclass
class SearchStats:
    """What a searching player spent, summed over its decisions: ``decisions`` searched (choice)
    decisions, ``simulations`` candidates played out, ``sim_steps`` engine decisions stepped in
    simulations (every simulation: 1 + up to ``depth``), ``seconds`` wall time in search."""

    decisions: int = 0
    simulations: int = 0
    sim_steps: int = 0
    seconds: float = 0.0
    chose_other: int = 0
    """Searched decisions whose choice was not the first candidate (the player's own pick)."""
    unconfirmed: int = 0
    """Departures from the own pick that the confirming playouts did not repeat (``confirm=C``),
    so the own pick was played."""

    def add(self, other: "SearchStats") -> None:
        self.decisions += other.decisions
        self.simulations += other.simulations
        self.sim_steps += other.sim_steps
        self.seconds += other.seconds
        self.chose_other += other.chose_other
        self.unconfirmed += other.unconfirmed


@dataclass
class Playouts:
    """What ``Lookahead.simulate`` saw of each candidate (one entry each, in order): ``board``
    (float64) ``board_value`` at the leaf minus the value now; with ``leaves``: ``returns``
    (float64) the searching seat's rewards along the path discounted by gamma per decision,
    ``discounts`` (float64) gamma ** decisions simulated (0 where the battle ended with a result;
    a truncated battle bootstraps from its last observation), ``leaves`` the seat's observation
    (a RoyaleGym obs dict) at each leaf."""

    board: np.ndarray
    returns: np.ndarray | None = None
    discounts: np.ndarray | None = None
    leaves: list = field(default_factory=list)


@dataclass
class Lookahead:
    """The second env candidates are tried in, built lazily from ``env_cfg`` (a RoyaleGym
    ``RustEngine`` takes a second or two to build: once per searching player, reused across
    its games) and the search's ``depth``."""

    env_cfg: object  # shared.config.EnvConfig of the battle's env (the evaluation env)
    depth: int
    stats: SearchStats = field(default_factory=SearchStats)
    _sims: list = field(default_factory=list)
    _fast: list = field(default_factory=list)
    """``shared.search.sim.FastSim`` over ``_sims`` (same order), built on first use."""
    _playout: object = None
    """The searching seat's continuation after its candidate (``act(obs, mask, rng)``): RoyaleGym's
    ``random`` when None at first use (``SearchSpec.cont``)."""
    playout_obs: bool = False
    """True when ``_playout`` reads the seat's whole observation (a network), so the simulated
    seat builds it (no ``mask_only``)."""
    _scratch: object = None
    """An engine ``redealt`` loads redealt battles into (its state hash rebuilt), built on first use."""
    _save_ids: object = None

    def sim_envs(self, n: int) -> list:
        """The first ``n`` simulation envs, built on first use (a lockstep opponent needs one per
        candidate; every other search one)."""
        if self._playout is None:
            from royalegym import RandomLegalOpponent

            self._playout = RandomLegalOpponent(PLAYOUT_NOOP_PROB)
        while len(self._sims) < n:
            from shared.envs import build_env

            self._sims.append(build_env(self.env_cfg))
        return self._sims[:n]

    def sim_env(self):
        """The first simulation env (``sim_envs(1)[0]``)."""
        return self.sim_envs(1)[0]

    def redealt(self, saved: tuple, seat: str, seen: np.ndarray, seed: int) -> tuple:
        """``saved`` (``save``'s pair) with the enemy's unseen cards redealt from ``seed``
        (``shared.search.hidden.redeal``; ``seen`` the seat's ``enemy_cards_seen``, (n_cards,)
        bool). The engine's save ids are read once, in a scratch env of this search's own."""
        from royalegym.state_mutator import Snapshot

        from shared.envs import build_env
        from shared.search.hidden import SaveIds, redeal

        if self._scratch is None:
            self._scratch = build_env(self.env_cfg).engine
            self._save_ids = SaveIds.read(self._scratch)
        snap, now = saved
        blob = redeal(snap.blob, 1 - SEAT_NAMES.index(seat), seen, np.random.default_rng((int(seed), 4)),
                      self._save_ids, self._scratch)
        return Snapshot(blob, memory=snap.memory, seat=snap.seat, max_ticks=snap.max_ticks, tag=snap.tag), now

    def scores(self, env, seat: str, candidates: list[int], opponent, seed: int) -> np.ndarray:
        """(len(candidates),) float64: ``board_value`` for ``seat`` after each candidate and its
        playout, minus the value now (``simulate``'s ``board``)."""
        return self.simulate(env, seat, candidates, opponent, seed).board

    def simulate(self, env, seat: str, candidates: list[int], opponent, seed: int, *, gamma: float | None = None,
                 leaves: bool = False, count: bool = True, saved: tuple | None = None) -> "Playouts":
        """Play each candidate and its playout in a second env; returns their ``Playouts``.

        ``env`` is the real battle, at a decision of ``seat`` (not over, no ``mask_only`` seat:
        ``ClashParallelEnv.snapshot`` refuses those). ``opponent`` plays the other seat in the
        simulations: an object with ``act(obs, rng) -> int`` that keeps no state between calls
        and ``scripted_seat`` (True when it reads the mask alone, so its simulated seat skips the
        observation build); or one with ``act_many(observations, rngs) -> actions`` and
        ``lockstep`` True (a network opponent answered by a remote batch), whose candidates are
        played side by side in one env each so that every decision asks once for all of them.
        Each candidate's own streams are the same either way ((seed, 1) for the seat's playout,
        (seed, 2) for the opponent's), so a local opponent scores the same side by side as one
        after another. ``leaves`` keeps each candidate's leaf observation of ``seat`` (so the
        seat's observation is built all along: slower) and its discounted rewards with
        ``gamma`` (required then), for the critic. ``count`` False leaves the searched-decision
        count to the caller (one decision of several playouts: ``evaluate``); ``saved`` is
        ``save(env, seat)`` taken once for such a decision (else the battle is saved here).
        """
        if leaves and gamma is None:
            raise ValueError("simulate(leaves=True) needs the iteration's gamma")
        t0 = time.perf_counter()
        width = len(candidates) if getattr(opponent, "lockstep", False) else 1
        sims = self.sim_envs(max(1, width))
        if leaves:  # the simulated rewards are the training's: every potential term on the iteration's gamma
            from shared.rewards import set_gamma

            for sim in sims:
                set_gamma(sim.reward_fn, gamma)
        me = SEAT_NAMES.index(seat)
        snap, now = saved if saved is not None else self.save(env, seat)
        mask_only = ([] if leaves or self.playout_obs else [seat]) + ([SEAT_NAMES[1 - me]] if getattr(opponent, "scripted_seat", False)
                                                  else [])
        act_many = getattr(opponent, "act_many", None) or (
            lambda observations, rngs: [opponent.act(o, r) for o, r in zip(observations, rngs)])
        out = Playouts(np.empty(len(candidates), np.float64))
        if leaves:
            out.returns, out.discounts = np.zeros(len(candidates), np.float64), np.zeros(len(candidates), np.float64)
        steps = 0
        # Both seats scripted and no rewards kept: the lean step (shared/search/sim.py), same battle.
        play = self._play_fast if not leaves and len(set(mask_only)) == 2 else self._play_group
        for lo in range(0, len(candidates), len(sims)):
            group = [int(a) for a in candidates[lo : lo + len(sims)]]
            steps += play(sims[: len(group)], snap, me, group, act_many, seed, mask_only, gamma, out, lo)
        out.board -= now
        self.stats.decisions += int(count)
        self.stats.simulations += len(candidates)
        self.stats.sim_steps += steps
        self.stats.seconds += time.perf_counter() - t0
        return out

    @staticmethod
    def save(env, seat: str) -> tuple:
        """(``env.snapshot()``, ``board_value`` now for ``seat``): what ``simulate`` starts from."""
        return env.snapshot(), board_value(env.battle_state, SEAT_NAMES.index(seat))

    def _play_group(self, sims, snap, me: int, group: list[int], act_many, seed: int, mask_only: list[str],
                    gamma: float | None, out: "Playouts", lo: int) -> int:
        """Candidates ``group`` side by side, one in each of ``sims``, from ``snap``; writes their
        board (before subtracting the value now), and with ``out.returns`` their returns,
        discounts and leaves, at ``lo`` onwards. Returns the engine decisions stepped."""
        seat, other = SEAT_NAMES[me], SEAT_NAMES[1 - me]
        n = len(group)
        obs = [sim.reset(options={"snapshot": snap, "mask_only": mask_only})[0] for sim in sims]
        own = [np.random.default_rng((seed, 1)) for _ in range(n)]
        opp = [np.random.default_rng((seed, 2)) for _ in range(n)]
        mine, ret, disc, ended = list(group), [0.0] * n, [1.0] * n, [False] * n
        live, steps = list(range(n)), 0
        for d in range(self.depth + 1):
            if d:
                for j in live:
                    mine[j] = int(self._playout.act(obs[j][seat], obs[j][seat]["action_mask"], own[j]))
            theirs = act_many([obs[j][other] for j in live], [opp[j] for j in live])
            still = []
            for j, a in zip(live, theirs):
                obs[j], rew, term, trunc, _ = sims[j].step({seat: mine[j], other: int(a)})
                steps += 1
                if out.returns is not None:
                    ret[j] += disc[j] * float(rew[seat])
                    disc[j] *= gamma
                if term[seat] or trunc[seat]:
                    ended[j] = bool(term[seat])
                else:
                    still.append(j)
            live = still
            if not live:
                break
        for j in range(n):
            out.board[lo + j] = board_value(sims[j].battle_state, me)
            if out.returns is not None:
                out.returns[lo + j], out.discounts[lo + j] = ret[j], 0.0 if ended[j] else disc[j]
                out.leaves.append(obs[j][seat])
        return steps

    def _play_fast(self, sims, snap, me: int, group: list[int], act_many, seed: int, mask_only: list[str],
                   gamma: float | None, out: "Playouts", lo: int) -> int:
        """``_play_group`` for a simulation whose two seats are scripted (both ``mask_only``)
        and whose rewards are not kept: the same moves on the same streams, stepped by
        ``shared.search.sim.FastSim`` on the same envs (each seat's mask built only when its bot
        reads it), so the same boards bit for bit. Returns the engine decisions stepped."""
        from shared.search.sim import FastSim

        while len(self._fast) < len(sims):
            self._fast.append(FastSim(sims[len(self._fast)]))
        fast = self._fast[: len(group)]
        for f in fast:
            f.reset(snap)
        n, other = len(group), 1 - me
        own = [np.random.default_rng((seed, 1)) for _ in range(n)]
        opp = [np.random.default_rng((seed, 2)) for _ in range(n)]
        mine, live, steps = list(group), list(range(n)), 0
        for d in range(self.depth + 1):
            if d:
                for j in live:
                    o = fast[j].obs(me)
                    mine[j] = int(self._playout.act(o, o["action_mask"], own[j]))
            theirs = act_many([fast[j].obs(other) for j in live], [opp[j] for j in live])
            still = []
            for j, a in zip(live, theirs):
                term, trunc = fast[j].step(mine[j], int(a)) if me == 0 else fast[j].step(int(a), mine[j])
                steps += 1
                if not (term or trunc):
                    still.append(j)
            live = still
            if not live:
                break
        for j in range(n):
            out.board[lo + j] = board_value(fast[j].state, me)
        return steps

    def choose(self, env, seat: str, candidates: list[int], opponent, seed: int) -> int:
        """The candidate with the highest score; ties go to the earliest (the player's own pick
        first). A single candidate is returned without a simulation."""
        if len(candidates) == 1:
            return int(candidates[0])
        best = int(np.argmax(self.scores(env, seat, candidates, opponent, seed)))
        if best:
            self.stats.chose_other += 1
        return int(candidates[best])


def gumbel_top_k(log_probs: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Up to ``k`` distinct actions drawn without replacement from the categorical with
    ``log_probs`` ((A,) float; -inf where illegal), in the order drawn: the top k of
    log_probs + Gumbel(0, 1) noise (Kool, van Hoof & Welling 2019, "Stochastic Beams and Where
    to Find Them"; Danihelka et al. 2022, Gumbel AlphaZero's root). The first is a sample of the
    categorical itself. Returns (min(k, legal),) int64."""
    lp = np.asarray(log_probs, np.float64)
    legal = np.flatnonzero(np.isfinite(lp))
    keys = lp[legal] + rng.gumbel(size=len(legal))
    order = np.argsort(-keys, kind="stable")[:k]
    return legal[order].astype(np.int64)


def mode_first(drawn: np.ndarray, log_probs: np.ndarray, k: int) -> np.ndarray:
    """(min(k, ...),) int64: ``log_probs``' argmax, then ``drawn``'s other actions in their order,
    cut to ``k``: a search whose own pick is the policy's mode (``own=argmax``,
    ``alphazero.own_pick`` "argmax") with the rest of its Gumbel draw as rivals."""
    mode = int(np.argmax(log_probs))
    return np.concatenate([[mode], drawn[drawn != mode][: k - 1]]).astype(np.int64)


def candidates_with_noop(drawn: np.ndarray, k: int) -> list[int]:
    """``drawn`` (actions in priority order, distinct) cut to ``k`` with the no-op (0) always
    among them: appended last, in place of the last drawn, when it was not drawn."""
    out = [int(a) for a in drawn[:k]]
    if 0 not in out:
        out = out[: k - 1] + [0]
    return out
