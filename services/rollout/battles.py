"""Battles and shards: what a rollout steps.

A ``Battle`` is one ``ClashParallelEnv`` with a global battle id, the episode ordinal it is
in, and the assignment of that episode (who plays each seat). A ``Shard`` is a group of
battles stepped together and answered for in one Round. Local slot ``2 * i + seat`` is seat
``seat`` (0 blue, 1 red) of the shard's i-th battle.

Episodes start at each battle's own boundary: the seed of episode ``k`` of battle ``b`` is
``env/battle/{b}/ordinal/{k}`` and its opponent is the ladder's assignment for (b, k), so an
episode is the same episode whichever rollout plays it and whenever.

Who holds a seat (its ``group``, shared.messages): the learner (GROUP_LEARNER), a frozen pool
snapshot (GROUP_FROZEN: the opponent id is ``snap:<id>``; the rollout ships its row and plays
the action the learner infers for it), or a scripted player stepped here (GROUP_SCRIPTED, no row).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from shared.assignments import AssignmentTable
from shared.codec import Codec
from shared.config import EnvConfig
from shared.envs import build_env, dealt_deck, episode_record, make_scripted, seat_deal
from shared.round_arrays import RoundArrays
from shared.messages import GROUP_FROZEN, GROUP_LEARNER, GROUP_SCRIPTED, SEATS, Assignment, EpisodeRecord, snapshot_of
from shared.rewards import TermMagnitudes, set_gamma
from shared.seeding import derive_int, stream, stream_path


class AssignmentMissing(RuntimeError):
    """The ladder's table has no assignment for an episode this battle is about to start."""


@dataclass
class Battle:
    battle_id: int
    env: object
    ordinal: int = -1
    assignment: Assignment | None = None
    groups: list[int] = field(default_factory=lambda: [GROUP_LEARNER, GROUP_LEARNER])
    players: list[str] = field(default_factory=lambda: ["learner", "learner"])
    scripted: list[object] = field(default_factory=lambda: [None, None])
    rng: np.random.Generator | None = None
    obs: dict | None = None
    tick: int = 0
    cards_played: list[int] = field(default_factory=lambda: [0, 0])
    returns: list[float] = field(default_factory=lambda: [0.0, 0.0])
    terms: TermMagnitudes = field(default_factory=TermMagnitudes)


@dataclass(kw_only=True)
class StepResult(RoundArrays):
    """One shard's arrays for a Round (``shared.round_arrays.RoundArrays``; see
    shared.messages.Round for which timestep each is), with what the shard saw doing it."""

    episodes: list[EpisodeRecord]
    env_seconds: float
    codec_clipped: int = 0
    codec_rounded: int = 0
    illegal_actions: int = 0
    search_seconds: float = 0.0
    search_steps: int = 0


class Shard:
    """A group of battles answered for together."""

    def __init__(self, index: int, env_cfg: EnvConfig, n_battles: int, codec: Codec, master_seed: int,
                 random_legal_noop_prob: float, mask_only_scripted: bool, search=None):
        """``search``: a ``services.rollout.search.ShardSearch`` (``Welcome.search``) run at the
        slots a Step names before the battles step, or None. A searched shard builds every seat's observation (no
        ``mask_only`` seat: the search saves battles with ``env.snapshot()``, which refuses them)."""
        self.index = index
        self.codec = codec
        self.master_seed = master_seed
        self.noop_prob = random_legal_noop_prob
        self.search = search
        self.mask_only = mask_only_scripted and search is None
        self.battles = [Battle(battle_id=-1, env=build_env(env_cfg)) for _ in range(n_battles)]
        # env.seat_decks: one curriculum mutator per learner seat (-1 mirror, 0 blue, 1 red),
        # swapped into a battle's env before each reset (shared/envs.py seat_deal).
        self.deals = {s: seat_deal(env_cfg, s) for s in (-1, 0, 1)} if env_cfg.seat_decks is not None else {}
        self.table = AssignmentTable()
        """(battle, ordinal) -> Assignment (shared/assignments.py); an entry is popped when its episode begins."""

    @property
    def n_slots(self) -> int:
        return 2 * len(self.battles)

    # ------------------------------------------------------------------ episodes

    def _begin_episode(self, battle: Battle, ordinal: int) -> None:
        key = (battle.battle_id, ordinal)
        if key not in self.table:
            raise AssignmentMissing(f"no assignment for battle {battle.battle_id} ordinal {ordinal}")
        a = self.table.pop(key)
        battle.ordinal, battle.assignment = ordinal, a
        frozen = snapshot_of(a.opponent) is not None
        for seat in (0, 1):
            learner = a.learner_seat in (-1, seat)
            battle.groups[seat] = GROUP_LEARNER if learner else GROUP_FROZEN if frozen else GROUP_SCRIPTED
            battle.players[seat] = "learner" if learner else a.opponent
            # A frozen seat has no player here: the learner infers its action centrally.
            battle.scripted[seat] = None if learner or frozen else make_scripted(a.opponent, self.noop_prob)
        battle.rng = stream(self.master_seed, "scripted/battle/{battle}/ordinal/{ordinal}",
                            battle=battle.battle_id, ordinal=ordinal)
        seed = derive_int(self.master_seed, stream_path("env/battle/{battle}/ordinal/{ordinal}",
                                                        battle=battle.battle_id, ordinal=ordinal))
        mask_only = [SEATS[s] for s in (0, 1) if battle.groups[s] == GROUP_SCRIPTED] if self.mask_only else []
        if self.deals:
            battle.env.state_mutator.inner = self.deals[a.learner_seat]
        battle.obs, _ = battle.env.reset(seed=seed, options={"mask_only": mask_only} if mask_only else None)
        battle.tick = 0
        battle.cards_played = [0, 0]
        battle.returns = [0.0, 0.0]
        battle.terms = TermMagnitudes()

    def set_gamma(self, gamma: float) -> None:
        """The iteration's discount, into every battle's reward (every potential term)."""
        for battle in self.battles:
            set_gamma(battle.env.reward_fn, gamma)
        if self.search is not None:
            self.search.set_gamma(gamma)

    def start(self, battle_ids: list[int], ordinals: list[int]) -> None:
        """(Re)start the listed battles at the given ordinals (-1: leave the battle running)."""
        for battle, bid, ordinal in zip(self.battles, battle_ids, ordinals):
            if ordinal >= 0 or battle.battle_id != bid:
                battle.battle_id = bid
                self._begin_episode(battle, max(ordinal, 0))

    # ------------------------------------------------------------------ stepping

    def observe(self) -> StepResult:
        """The round for the current state with no step behind it (cycle 0 after a start)."""
        n = self.n_slots
        return self._result(np.zeros(n, np.float32), np.zeros(n, np.uint8), np.zeros(n, np.uint8),
                            np.full(n, -1, np.int8), [], [], [], 0.0, 0)

    def step(self, actions: np.ndarray, search: dict | None = None, learner=None) -> StepResult:
        """Advance every battle by one decision. ``actions`` (n_slots,) int: the learner's
        action for learner-held and frozen-held slots (scripted slots' entries ignored).
        ``search``: the Step's ``search_slots``/``search_candidates``/``search_keys`` (a searched
        shard: those slots are searched first and play the search's move; the result carries
        the search as the round's ``SEARCH`` arrays). ``learner``: the step's
        ``services.rollout.mid_step.StepLearner``, which the search asks for critic leaves and a
        network opponent's simulated moves (``ShardSearch.run``)."""
        found = None
        if self.search is not None and search:
            found = self.search.run(self.battles, search["search_slots"], search["search_candidates"],
                                    search["search_keys"], learner)
            actions = np.array(actions, copy=True)
            actions[found.slots.astype(np.int64)] = found.moves
        result = self._step(actions)
        if found is not None:
            result.search_slots, result.search_candidates = found.slots, found.candidates
            result.search_q, result.search_moves = found.q, found.moves
            result.search_seconds, result.search_steps = found.seconds, found.sim_steps
        return result

    def _step(self, actions: np.ndarray) -> StepResult:
        n = self.n_slots
        reward = np.zeros(n, np.float32)
        terminated = np.zeros(n, np.uint8)
        truncated = np.zeros(n, np.uint8)
        deploy = np.full(n, -1, np.int8)
        final_slots, final_obs, episodes = [], [], []
        illegal = 0
        t0 = time.perf_counter()
        for i, battle in enumerate(self.battles):
            # actions from here on press ability buttons (RoyaleGym's parser; none without them)
            n_grid = getattr(getattr(battle.env, "action_parser", None), "n_tile_actions", 1 << 30)
            chosen = {}
            for seat in (0, 1):
                name, obs = SEATS[seat], battle.obs[SEATS[seat]]
                if battle.groups[seat] in (GROUP_LEARNER, GROUP_FROZEN):
                    a = int(actions[2 * i + seat])
                    if not (0 <= a < obs["action_mask"].shape[0]) or not obs["action_mask"][a]:
                        illegal += 1
                elif battle.scripted[seat] is None:
                    a = 0
                else:
                    a = int(battle.scripted[seat].act(obs, obs["action_mask"], battle.rng))
                chosen[name] = a
            obs, rew, term, trunc, info = battle.env.step(chosen)
            battle.terms.add(battle.env.reward_fn)
            battle.tick = int(info["blue"].get("tick", battle.tick))
            ended = bool(term["blue"] or trunc["blue"])
            for seat in (0, 1):
                name, slot = SEATS[seat], 2 * i + seat
                reward[slot] = rew[name]
                terminated[slot] = bool(term[name])
                truncated[slot] = bool(trunc[name]) and not bool(term[name])
                deploy[slot] = int(info[name].get("deploy_status", -1))
                battle.returns[seat] += float(rew[name])
                # an ability-button press (env.ability_buttons) is not a card played
                if chosen[name] != 0 and deploy[slot] == 0 and chosen[name] < n_grid:
                    battle.cards_played[seat] += 1
            battle.obs = obs
            if ended:
                for seat in (0, 1):
                    slot = 2 * i + seat
                    if truncated[slot] and battle.groups[seat] == GROUP_LEARNER:
                        final_slots.append(slot)
                        final_obs.append(obs[SEATS[seat]])
                    episodes.append(self._record(battle, seat, info[SEATS[seat]], bool(truncated[slot])))
                self._begin_episode(battle, battle.ordinal + 1)
        return self._result(reward, terminated, truncated, deploy, final_slots, final_obs, episodes,
                            time.perf_counter() - t0, illegal)

    def _record(self, battle: Battle, seat: int, info: dict, truncated: bool) -> EpisodeRecord:
        return episode_record(
            info, truncated=truncated,
            battle=battle.battle_id, ordinal=battle.ordinal, seat=SEATS[seat],
            role=battle.assignment.role if battle.assignment else "mirror",
            player=battle.players[seat], opponent=battle.players[1 - seat],
            cards_played=battle.cards_played[seat], undiscounted_return=battle.returns[seat],
            reward_terms_abs=battle.terms.finish(seat), deck=dealt_deck(battle.env, seat),
        )

    def _result(self, reward, terminated, truncated, deploy, final_slots, final_obs, episodes,
                env_seconds, illegal) -> StepResult:
        group = np.empty(self.n_slots, np.int8)
        tick = np.empty(self.n_slots, np.int32)
        ordinal = np.empty(self.n_slots, np.int32)
        held_obs = []  # every slot whose group is >= 0 (learner and frozen), in slot order
        for i, battle in enumerate(self.battles):
            for seat in (0, 1):
                slot = 2 * i + seat
                group[slot] = battle.groups[seat]
                tick[slot] = battle.tick
                ordinal[slot] = battle.ordinal
                if battle.groups[seat] >= 0:
                    held_obs.append(battle.obs[SEATS[seat]])
        # Fresh arrays every round: they go to ZeroMQ without a copy and must not be written
        # again before they have left (the next step packs into new memory).
        rows, clipped, rounded = self.codec.pack_many(held_obs)
        frows, c2, r2 = self.codec.pack_many(final_obs)
        return StepResult(group=group, tick=tick, ordinal=ordinal, rows=rows, reward=reward, terminated=terminated,
                          truncated=truncated, deploy_status=deploy, final_slots=np.asarray(final_slots, np.int16),
                          final_rows=frows, episodes=episodes, env_seconds=env_seconds,
                          codec_clipped=clipped + c2, codec_rounded=rounded + r2, illegal_actions=illegal)
