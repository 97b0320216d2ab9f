"""Batched central inference (services/learner/rounds.py ``infer_rounds``): each round's actions
are drawn from its own uniforms whatever the batch composition; under run_exact each round is
its own forward (the canonical composition), bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.learner.rounds import infer_rounds
from shared.config import EnvConfig, tiny
from shared.nn.model import ActorCritic
from shared.nn.policy import Policy
from shared.preflight import run_preflight

LOGP_TOL = 1e-5
"""fp32 on the CPU: a row's log-prob may differ by rounding with its place in a batch
(docs/protocol.md, "Batched inference")."""


@pytest.fixture(scope="module")
def policy_and_codec():
    pf = run_preflight(EnvConfig(max_steps=20), 11)
    torch.set_num_threads(1)
    return Policy(ActorCritic(pf.spec, tiny().net, seed=1), pf.codec, torch.device("cpu")), pf.codec


def random_rows(codec, n: int, seed: int) -> np.ndarray:
    """Packed rows with every field in range: small counts, scaled values, float16 planes and
    vector, a random legal set that always holds the no-op."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((n, codec.row_bytes), np.uint8)
    n8 = len(codec.idx["uint8"]) * codec.hw
    rows[:, :n8] = rng.integers(0, 3, (n, n8))
    rows[:, codec.o16:codec.of16].view("<u2")[:] = rng.integers(0, 200, (n, (codec.of16 - codec.o16) // 2))
    rows[:, codec.of16:codec.ovec].view("<f2")[:] = rng.random((n, (codec.ovec - codec.of16) // 2)).astype(np.float16)
    rows[:, codec.ovec:codec.omask].view("<f2")[:] = rng.random((n, (codec.omask - codec.ovec) // 2)).astype(np.float16)
    mask = rng.random((n, codec.table.n_actions)) < 0.05
    mask[:, 0] = True
    mask[: n // 8, 1:] = False  # some forced rows
    rows[:, codec.omask:] = np.packbits(mask, axis=1, bitorder="little")
    return rows, mask.sum(1).astype(np.int32)


def requests(codec, sizes, seed=0):
    out = []
    for i, n in enumerate(sizes):
        rows, n_legal = random_rows(codec, n, seed + i)
        out.append((rows, n_legal, np.random.default_rng(100 + seed + i).random(n), None))  # no frame history
    return out


SIZES = [12, 12, 7, 12, 30, 1, 12, 9]


def test_the_canonical_composition_answers_each_round_alone_bit_for_bit(policy_and_codec):
    policy, codec = policy_and_codec
    reqs = requests(codec, SIZES)
    alone = [policy.act(*r) for r in reqs]
    order = np.random.default_rng(3).permutation(len(reqs))
    sizes: list = []
    got = infer_rounds(policy, [reqs[i] for i in order], 0, sizes)
    assert sizes == [SIZES[i] for i in order]  # one forward a round
    for k, i in enumerate(order):
        assert np.array_equal(got[k][0], alone[i][0])
        assert got[k][1].tobytes() == alone[i][1].tobytes()  # exactly: not within a tolerance


@pytest.mark.parametrize("max_rows", [10_000, 40, 13, 1])
def test_batched_forwards_give_each_round_the_actions_of_its_own_uniforms(policy_and_codec, max_rows):
    policy, codec = policy_and_codec
    reqs = requests(codec, SIZES, seed=20)
    alone = [policy.act(*r) for r in reqs]
    sizes: list = []
    got = infer_rounds(policy, reqs, max_rows, sizes)
    assert len(got) == len(reqs) and sum(sizes) == sum(SIZES)
    assert all(s <= max_rows or s in SIZES for s in sizes)  # only a round larger than the cap goes alone
    for (a, lp), (a0, lp0), r in zip(got, alone, reqs):
        assert len(a) == len(r[0])  # each Step answers its own shard, in order
        assert np.array_equal(a, a0)
        assert np.max(np.abs(lp - lp0)) <= LOGP_TOL


def test_batches_are_cut_at_the_cap_in_arrival_order(policy_and_codec):
    policy, codec = policy_and_codec
    sizes: list = []
    infer_rounds(policy, requests(codec, [20, 20, 20, 5, 60, 3]), 50, sizes)
    assert sizes == [40, 25, 60, 3]


def test_each_round_knows_where_its_choice_rows_sat_in_the_batched_forward(policy_and_codec):
    """The replay stamp (services/learner/provenance.py) records a choice row's forward size and
    place; in a batched forward those are the batch's, offset by the rounds before it."""
    policy, codec = policy_and_codec
    reqs = requests(codec, [20, 20, 20, 5, 60, 3], seed=40)
    choice = [int((r[1] > 1).sum()) for r in reqs]
    places: list = []
    infer_rounds(policy, reqs, 50, None, places)
    first = choice[0] + choice[1]  # forward 1: rounds 0-1; forward 2: rounds 2-3; then 4 and 5 alone
    assert places == [(0, first), (choice[0], first), (0, choice[2] + choice[3]), (choice[2], choice[2] + choice[3]),
                      None, None]
    places = []
    infer_rounds(policy, reqs, 0, None, places)
    assert places == [None] * 6  # run_exact: every round its own forward
