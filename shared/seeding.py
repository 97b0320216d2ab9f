"""Name-addressed random streams.

Every random draw in a run comes from a generator derived from the master seed and a PATH
naming its consumer (``"act/iteration/4/cycle/17"``), never from a global RNG and never by
spawning children in the order code happens to ask. A stream is therefore a pure function of
(master seed, path): adding a consumer moves no other stream, and two processes on two
machines derive the same numbers. The path is hashed with blake2b-128 into the spawn key of a
numpy ``SeedSequence`` (fixed forever, unlike Python's ``hash``); the generator is PCG64,
stable across numpy versions and platforms.

``STREAMS`` is the whole namespace. Paths are built with ``stream_path`` so that a typo is an
error naming the template instead of a private stream that silently works.
"""

from __future__ import annotations

import hashlib
import string

import numpy as np

from shared.algorithms import merged

_CORE: dict[str, str] = {
    "env/battle/{battle}/ordinal/{ordinal}": "the reset seed of one episode of one battle (decks, engine)",
    "match/battle/{battle}/ordinal/{ordinal}": "who plays one episode of one battle: opponent and learner seat",
    "match/roles/battles/{battles}": "the permutation laying mirror/pool/scripted roles over battle indices",
    "match/resident/pool_version/{version}": "the PFSP draw of the resident pool opponents for one version of the pool",
    "scripted/battle/{battle}/ordinal/{ordinal}": "a scripted opponent's own draws during one episode",
    "act/iteration/{iteration}/cycle/{cycle}": "the (R,) uniforms the learner samples one cycle's actions from",
    "act/frozen/iteration/{iteration}/cycle/{cycle}": "the (R,) uniforms one cycle's frozen-snapshot seats sample from",
    "ppo/minibatch/iteration/{iteration}/epoch/{epoch}": "the row permutation of one PPO epoch",
    "dqn/thompson/slot/{slot}/episode/{episode}":
        "the ensemble head a seat (slot 2 * battle id + seat) acts by for one episode (its ordinal; DQN, Thompson)",
    "dqn/heads/init": "the DQN Q network's heads 1..K-1 and dueling value streams (head 0 starts as the actor's)",
    "dqn/replay/iteration/{iteration}": "the prioritized replay draws of one DQN iteration's minibatches",
    "dqn/bootstrap_masks/iteration/{iteration}": "the Bernoulli bootstrap masks of the records one iteration inserts",
    "search/battle/{battle}/ordinal/{ordinal}/tick/{tick}/seat/{seat}":
        "a rollout search's simulation streams at one choice decision of one learner seat",
    "az/minibatch/iteration/{iteration}/epoch/{epoch}": "the row permutation of one AlphaZero epoch",
    "search/gumbel/iteration/{iteration}/cycle/{cycle}/slot/{slot}":
        "the Gumbel noise whose top-k over one learner row's prior names the row's search candidates (alphazero)",
    "search/full/iteration/{iteration}/cycle/{cycle}/slot/{slot}":
        "the playout-cap coin: whether one learner choice row is searched fully (alphazero.full_search_share)",
    "preflight/sample": "the random-legal play that samples observations for the codec table",
    "torch/init": "initial network weights",
    "eval/bootstrap/{comparison}": "bootstrap resamples over seeds for one gate comparison",
    "eval/stratified/{candidate}": "the pool members a candidate's gate plays for condition 3",
    "eval/seed_set": "the fixed evaluation seed set (ladder.pool.eval_seed_count env seeds), drawn once",
    "eval/act/job/{job}/seed/{seed}/side/{side}/seat/{seat}":
        "one seat's action uniforms (and a scripted player's draws) in one evaluation game",
    "demos/teacher/battle/{battle}/seat/{seat}": "a teacher's draws on one recorded seat of one demonstration battle",
    "demos/apprentice/battle/{battle}/seat/{seat}": "a DAgger apprentice's draws on one recorded seat of one battle",
    "demos/dagger/battle/{battle}/seat/{seat}": "the coins that give a DAgger apprentice its share of the decisions",
    "demos/opponent/battle/{battle}/seat/{seat}": "a snapshot opponent's draws on its (unrecorded) seat of one demonstration battle",
    "clone/split": "which demonstration battles a clone holds out for validation",
    "clone/init": "a clone's initial network weights",
    "clone/epoch/{epoch}": "the row order of one clone epoch",
}

STREAMS: dict[str, str] = merged(_CORE, "seed_streams", "shared/seeding.py")
"""Every stream: RoyaleFleet's own, then each learner algorithm's ``seed_streams`` (shared/algorithms.py)."""

_FIELDS = {t: {f for _, f, _, _ in string.Formatter().parse(t) if f} for t in STREAMS}


def stream_path(template: str, /, **fields: object) -> str:
    """Fill one row of STREAMS. Raises KeyError naming the template for an unknown template
    or a missing/extra field."""
    if template not in STREAMS:
        raise KeyError(f"unknown random stream template {template!r}; known: {', '.join(STREAMS)}")
    if set(fields) != _FIELDS[template]:
        raise KeyError(
            f"stream {template!r} takes fields {sorted(_FIELDS[template])}, got {sorted(fields)}"
        )
    return template.format(**fields)


def _spawn_key(path: str) -> tuple[int, int, int, int]:
    digest = hashlib.blake2b(path.encode(), digest_size=16).digest()
    return tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))  # type: ignore[return-value]


def derive_seedseq(master_seed: int, path: str) -> np.random.SeedSequence:
    """The SeedSequence of one named stream of one run."""
    return np.random.SeedSequence(entropy=master_seed, spawn_key=_spawn_key(path))


def derive_generator(master_seed: int, path: str) -> np.random.Generator:
    """A PCG64 generator for one named stream."""
    return np.random.Generator(np.random.PCG64(derive_seedseq(master_seed, path)))


def derive_int(master_seed: int, path: str) -> int:
    """A reproducible 63-bit integer (fits gymnasium's signed 64-bit seed check), for env seeds."""
    words = derive_seedseq(master_seed, path).generate_state(2, dtype=np.uint32)
    return int((int(words[0]) << 32 | int(words[1])) >> 1)


def stream(master_seed: int, template: str, /, **fields: object) -> np.random.Generator:
    """``derive_generator(master_seed, stream_path(template, **fields))``."""
    return derive_generator(master_seed, stream_path(template, **fields))
