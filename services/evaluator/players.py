"""Evaluation players: a scripted anchor, or a frozen snapshot inferred on the CPU.

Every player answers ``act(obs, rng) -> action`` for one seat and one decision, where ``obs`` is
RoyaleGym's seat observation and ``rng`` is the seat's own generator of the game (stream
``eval/act/job/{job}/seed/{seed}/side/{side}/seat/{seat}``).

* ``ScriptedPlayer``: ``shared.envs.make_scripted``, exactly the training
  opponents (``scripted:random_legal`` draws from ``rng``; ``scripted:noop`` always waits;
  ``scripted:<rung>`` is RoyaleGym's ladder bot of that name).
* ``SnapshotPlayer``: the snapshot's fp16 actor (``actor.safetensors`` from the snapshot store)
  cast to float32, on the CPU. The observation is packed by ``shared.codec`` exactly as a
  rollout packs it and unpacked as the learner does (so the snapshot sees what it was trained
  on, float16 vector included), then sampled by ``shared.nn.policy.Policy`` (inverse CDF). One
  float32 uniform is drawn from ``rng`` at EVERY decision, forced or not, so the action at
  decision t depends on t's uniform alone.

Loading is ``shared.nn.snapshot``'s (the learner's frozen seats load the same way): a snapshot
whose spec was written for another network, observation layout or codec table is refused naming
the field (royalelearn-facts 6.3: "loads with mismatched arch/obs/codec-table digests are refused
by field name"). What is the evaluator's own: one torch thread, and refusal as ``SnapshotRefused``
(the job is not played; services/evaluator/service.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shared.config import RunConfig
from shared.envs import make_scripted
from shared.scripted import SCRIPTED_PLAYERS, unknown_scripted
from shared.messages import snapshot_of

EVAL_TORCH_THREADS = 1
"""Torch intra-op threads while evaluating: a fixed count, so a re-run of a gate computes the
same logits bit for bit on the same machine class (royalelearn-facts 8)."""


class SnapshotRefused(ValueError):
    """A snapshot that cannot be played here; the text names the field and both values."""


class ScriptedPlayer:
    """A scripted player by its id (``shared.scripted.SCRIPTED_PLAYERS``: the run's anchors and
    RoyaleGym's ladder bots). Its seat is ``mask_only``: it reads the mask planes alone. Raises
    ValueError naming the id and the known ones for another id."""

    def __init__(self, player_id: str, random_legal_noop_prob: float):
        if player_id not in SCRIPTED_PLAYERS:
            raise ValueError(unknown_scripted(player_id))
        self.id = player_id
        self.scripted_seat = True
        self.stateless = True  # RoyaleGym's bots read the decision's mask alone (a search may replay them)
        self._bot = make_scripted(player_id, random_legal_noop_prob)

    def act(self, obs: dict, rng: np.random.Generator) -> int:
        if self._bot is None:
            return 0
        return int(self._bot.act(obs, obs["action_mask"], rng))


class SnapshotPlayer:
    """A frozen snapshot: ``policy`` is a ``shared.nn.policy.Policy`` over the float32 actor,
    ``codec`` the run's codec (table and static planes)."""

    def __init__(self, player_id: str, policy, codec):
        self.id = player_id
        self.scripted_seat = False
        self.stateless = policy.frame_stack == 1  # a frame-stacked seat keeps a history
        self.policy, self.codec = policy, codec

    def act(self, obs: dict, rng: np.random.Generator) -> int:
        u = rng.random(1, dtype=np.float32)  # drawn at every decision, forced rows included
        n_legal = int(np.count_nonzero(obs["action_mask"]))
        if n_legal <= 1:
            return 0  # only the no-op is legal: no forward (shared.nn.policy)
        rows, _, _ = self.codec.pack_many([obs])
        actions, _ = self.policy.act(rows, np.array([n_legal]), u)
        return int(actions[0])

    def log_probs(self, obs: dict) -> np.ndarray:
        """(A,) float64 log-probabilities of every action at ``obs`` (-inf where illegal), with
        no draw from any stream: a search's candidate prior (services/evaluator/searched.py)."""
        rows, _, _ = self.codec.pack_many([obs])
        return self.policy.legal_log_probs(rows)[0]

    def for_game(self):
        """The player of one seat of one game: itself, or under frame stacking
        (``obs.frame_stack`` > 1) a ``StackedSeat`` holding that seat's history from the game's
        first decision (services/evaluator/games.py seats these)."""
        return self if self.policy.frame_stack == 1 else StackedSeat(self)


class GreedyPlayer:
    """A snapshot playing its policy's argmax over the legal actions (temperature 0:
    ``snap:<id>+greedy``, ``shared.evaluation.GREEDY_MARK``) instead of sampling it. It draws
    the same one float32 uniform a decision from ``rng`` as ``SnapshotPlayer`` and does not use
    it, so the other seat's streams are those of the sampled game. Ties go to the lowest action
    index (``numpy.argmax``). Raises ValueError for a frame-stacked snapshot (its argmax would
    need the seat's history)."""

    def __init__(self, player_id: str, base: SnapshotPlayer):
        if not base.stateless:
            raise ValueError(f"player {player_id!r}: greedy play needs obs.frame_stack 1 (the run stacks "
                             f"{base.policy.frame_stack} frames); play {base.id} sampled")
        self.id, self.base = player_id, base
        self.scripted_seat, self.stateless = False, True

    def act(self, obs: dict, rng: np.random.Generator) -> int:
        rng.random(1, dtype=np.float32)  # drawn and unused: the streams stay the sampled player's
        if int(np.count_nonzero(obs["action_mask"])) <= 1:
            return 0  # only the no-op is legal: no forward, as SnapshotPlayer
        return int(np.argmax(self.base.log_probs(obs)))

    def log_probs(self, obs: dict) -> np.ndarray:
        """The base snapshot's (``SnapshotPlayer.log_probs``)."""
        return self.base.log_probs(obs)

    def for_game(self):
        return self


class StackedSeat:
    """A snapshot playing one seat of one game with frame stacking: every decision's packed row
    (forced ones too) goes into the seat's history (``shared.nn.frame_stack.SeatHistory``), the
    first decision's history is all missing (zeros), as in training."""

    def __init__(self, player: SnapshotPlayer):
        from shared.nn.frame_stack import SeatHistory

        self.id, self.scripted_seat = player.id, False
        self.policy, self.codec = player.policy, player.codec
        self.history = SeatHistory(player.policy.frame_stack, player.codec.row_bytes)

    def act(self, obs: dict, rng: np.random.Generator) -> int:
        u = rng.random(1, dtype=np.float32)  # drawn at every decision, as SnapshotPlayer
        n_legal = int(np.count_nonzero(obs["action_mask"]))
        rows, _, _ = self.codec.pack_many([obs])
        action = 0
        if n_legal > 1:
            actions, _ = self.policy.act(rows, np.array([n_legal]), u, self.history.history())
            action = int(actions[0])
        self.history.push(rows[0])
        return action


@dataclass
class RunFacts:
    """What a snapshot needs from its run: the observation layout, the codec (table + static
    planes) and the digests a snapshot's spec must match. From ``run_facts``."""

    spec: object  # shared.envs.ObsSpec
    codec: object  # shared.codec.Codec
    arch_digest: str
    obs_digest: str
    codec_table_digest: str
    engine: object = None  # shared.messages.EngineBuild of this process's RoyaleGym

    @property
    def expected(self) -> dict[str, str]:
        """The digests a snapshot's spec must hold: ``shared.nn.snapshot.SPEC_DIGESTS`` -> value."""
        return {"arch_digest": self.arch_digest, "obs_digest": self.obs_digest,
                "codec_table_digest": self.codec_table_digest}


def run_facts(cfg: RunConfig) -> RunFacts:
    """Decide the run's codec exactly as its learner did (``shared.preflight``: the
    training env, stream ``preflight/sample``), so rows are packed with the same table. Takes a
    few seconds (it plays 1,000 random-legal states); call once per process."""
    from shared.codec import table_digest
    from shared.identity import config_digests
    from shared.preflight import run_preflight

    pf = run_preflight(cfg.env, cfg.master_seed, frame_stack=cfg.obs.frame_stack)
    return RunFacts(spec=pf.spec, codec=pf.codec, arch_digest=config_digests(cfg)["arch_digest"],
                    obs_digest=pf.spec.digest(), codec_table_digest=table_digest(pf.table), engine=pf.engine)


def check_spec(snapshot_id: str, spec: bytes, facts: RunFacts) -> dict:
    """The decoded spec, or SnapshotRefused naming every field of it that does not fit the run
    (``shared.nn.snapshot.check_spec``: every digest, a missing one included, and the dtype)."""
    from shared.nn.snapshot import SnapshotSpecError, check_spec as check

    try:
        return check(snapshot_id, spec, facts.expected)
    except SnapshotSpecError as exc:
        raise SnapshotRefused(f"{exc}. Evaluate it with the config of the run that wrote it") from None


def load_snapshot_player(player_id: str, actor_bytes: bytes, spec_bytes: bytes, cfg: RunConfig,
                         facts: RunFacts) -> SnapshotPlayer:
    """A SnapshotPlayer from a snapshot's two files. Raises SnapshotRefused for a spec that does
    not fit the run (``check_spec``), ValueError (``shared.nn.snapshot.SnapshotWeightsError``) for
    bytes that are not a float16 actor of the run's network."""
    import torch

    from shared.nn.policy import Policy
    from shared.nn.snapshot import ActorOnly, actor_builder, load_frozen_actor

    sid = snapshot_of(player_id)
    if sid is None:
        raise ValueError(f"player {player_id!r} is not a snapshot (snap:<snapshot_id>)")
    check_spec(sid, spec_bytes, facts)
    torch.set_num_threads(EVAL_TORCH_THREADS)
    actor = load_frozen_actor(sid, actor_bytes, actor_builder(facts.spec, cfg.net), "cpu")
    return SnapshotPlayer(player_id, Policy(ActorOnly(actor), facts.codec, torch.device("cpu")), facts.codec)
