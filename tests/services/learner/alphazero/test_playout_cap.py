"""Playout-cap randomisation (``alphazero.full_search_share``; KataGo, Wu 2019, sec. 3.1): the
coin's share over many decisions, a fast (unsearched) decision never getting a policy target,
the value-only rows it leaves in AlphaZero's batch and in expert iteration's replay, and the
share at 1 leaving the run id, the Step and the row as they were."""

from __future__ import annotations

import math
from types import SimpleNamespace

import msgspec
import numpy as np
import pytest

from services.learner.alphazero.book import SearchBook, SearchTarget
from services.learner.alphazero.learner import az_batch
from services.learner.expert_iteration.learner import searched_part
from services.learner.expert_iteration.replay import SearchReplay
from services.learner.expert_iteration.targets import ExpitBook, Searched
from shared.config import load_config
from shared.search.targets import gumbel_move_index
from shared.seeding import stream

LOG_PRIOR = np.log(np.array([0.4, 0.3, 0.2, 0.1]))


class _Policy:
    def legal_log_probs(self, rows):
        return np.tile(LOG_PRIOR, (len(rows), 1))


def _propose(book: SearchBook, iteration: int, cycle: int, slots: np.ndarray) -> dict:
    n = len(slots)
    return book.propose(_Policy(), iteration, cycle, slots, np.arange(n), np.zeros((n, 4), np.uint8),
                        np.full(n, 4), np.zeros(n, np.int64))


@pytest.mark.parametrize("share", [0.1, 0.25, 0.5, 0.9])
def test_the_coins_share_over_many_decisions_is_the_configured_share(share):
    """8,000 decisions (40 cycles x 200 slots, two iterations): the realised share lies within 5
    standard errors (sqrt(share (1 - share) / n)) of the share, and a second book on the same
    seed draws the same coin for every decision (the stream is a pure function of the row)."""
    a = SearchBook(c_scale=0.1, candidates=2, master_seed=3, full_share=share)
    b = SearchBook(c_scale=0.1, candidates=2, master_seed=3, full_share=share)
    coins = np.array([[a.full_search(i, t, s) for s in range(200)] for i in (1, 2) for t in range(40)])
    n = coins.size
    assert abs(coins.mean() - share) < 5 * math.sqrt(share * (1 - share) / n)
    assert coins.tolist() == [[b.full_search(i, t, s) for s in range(200)] for i in (1, 2) for t in range(40)]
    # the coin is the stream's first uniform below the share, worked out apart
    u = stream(3, "search/full/iteration/{iteration}/cycle/{cycle}/slot/{slot}", iteration=2, cycle=7, slot=11).random()
    assert a.full_search(2, 7, 11) == (u < share)


def test_the_step_names_the_fully_searched_rows_only_and_the_row_reports_the_share():
    book = SearchBook(c_scale=0.1, candidates=2, master_seed=5, full_share=0.5)
    slots = np.arange(100, 160)
    req = _propose(book, 4, 2, slots)
    full = [s for s in slots.tolist() if book.full_search(4, 2, s)]
    assert 0 < len(full) < 60
    assert slots[req["search_slots"]].tolist() == full  # local indices of the full rows, in order
    assert sorted(book.pending) == [(2, s) for s in full]
    assert book.fast == {(2, s) for s in slots.tolist() if s not in full}
    row = book.row(collect_seconds=1.0, env_steps=60)
    assert row["search/fast_decisions"] == 60 - len(full) and row["search/full_frac"] == len(full) / 60
    book.begin()
    assert not book.fast and book.proposed == 0


def test_a_fast_decision_never_gets_a_policy_target_even_when_a_search_is_reported_for_it():
    """A report for every choice row, each with a move the rule plays: the fully-searched rows get
    targets, every fast row is refused (it was never proposed), exactly."""
    book = SearchBook(c_scale=0.1, candidates=2, master_seed=5, full_share=0.3)
    slots = np.arange(0, 80)
    req = _propose(book, 1, 0, slots)
    full = slots[req["search_slots"]].tolist()
    fast = sorted(s for _, s in book.fast)
    assert len(full) + len(fast) == 80 and not set(full) & set(fast)
    cands = {s: c for s, c in zip(full, req["search_candidates"])}
    keys = {s: k for s, k in zip(full, req["search_keys"])}
    q = np.array([0.0, 1.0], np.float32)
    forged = np.array([0, 1], np.int16)  # a fast row's forged report: its move the rule's over keys [0, 0]
    c = np.stack([cands.get(s, forged) for s in slots.tolist()])
    moves = [int(c[s][gumbel_move_index(keys[s], q, c_scale=0.1)]) if s in cands
             else int(forged[gumbel_move_index(np.zeros(2), q, c_scale=0.1)]) for s in slots.tolist()]
    done = book.complete(0, slots, c, np.tile(q, (80, 1)), np.array(moves))
    assert sorted(s for s, _, _ in done) == full
    assert sorted(book.targets) == [(0, s) for s in full]
    assert book.refused == len(fast)


def _rect_and_adv():
    T, R = 2, 3
    rect = SimpleNamespace(rows=np.arange(T * R * 2, dtype=np.uint8).reshape(T, R, 2), R=R, row_bytes=2,
                           mask_offset=1)  # byte 0 the observation, byte 1 the mask of 4 actions
    adv = SimpleNamespace(trainable=np.ones((T, R), bool), returns=np.arange(T * R, dtype=np.float64).reshape(T, R),
                          nan_trips=0)
    return rect, adv


def test_alphazero_trains_a_fast_row_value_only():
    rect, adv = _rect_and_adv()
    book = SearchBook(c_scale=0.1, candidates=2, master_seed=0, full_share=0.5)
    book.targets[(0, 1)] = SearchTarget(np.array([0, 2], np.int16), np.array([0.25, 0.75], np.float32), 0.0, 0.0, False)
    book.fast.update({(0, 2), (1, 0)})
    batch = az_batch(rect, adv, book, n_actions=4)
    assert batch.policy_weights.tolist() == [0, 1, 0, 0, 0, 0]
    assert batch.legal_offsets.tolist() == [0, 0, 2, 2, 2, 2, 2]
    assert batch.value_targets.tolist() == [0, 1, 2, 3, 4, 5]


def test_expert_iterations_replay_holds_fast_rows_value_only_under_the_return_target():
    rect, adv = _rect_and_adv()
    book = ExpitBook(c_scale=0.1, candidates=2, master_seed=0, full_share=0.5)
    for cell, root in (((0, 1), 0.5), ((1, 2), -0.5)):
        book.targets[cell] = SearchTarget(np.array([0, 2], np.int16), np.array([0.25, 0.75], np.float32), 0.0, 0.0,
                                          False)
        book.searched[cell] = Searched(root, np.zeros(2, np.float32), 0)
    book.fast.update({(0, 2), (1, 0)})
    c = SimpleNamespace(rect=rect)
    part = searched_part(3, c, adv, book, root=False)  # cells (0, 1), (0, 2) fast, (1, 0) fast, (1, 2)
    assert part.rows[:, 0].tolist() == [2, 4, 6, 10]
    assert part.legal_offsets.tolist() == [0, 2, 2, 2, 4] and part.values.tolist() == [1, 2, 3, 5]
    assert part.labels() == 2
    labelled = part.labelled()
    assert labelled.rows[:, 0].tolist() == [2, 10] and labelled.legal_offsets.tolist() == [0, 2, 4]
    assert labelled.values.tolist() == [1, 5] and labelled.probs.tolist() == [0.25, 0.75, 0.25, 0.75]
    replay = SearchReplay(4, 100)
    replay.add(part)
    batch = replay.batch(mask_offset=1, n_actions=4)
    assert batch.policy_weights.tolist() == [1, 0, 0, 1] and replay.labels() == 2
    # under the root value target a fast row has no value target: it stays out
    root = searched_part(3, c, adv, book, root=True)
    assert root.rows[:, 0].tolist() == [2, 10] and root.values.tolist() == [0.5, -0.5]


def test_the_share_at_one_keeps_the_run_id_the_step_and_the_row():
    from shared.identity import compute_identity, run_id

    def rid(doc):
        cfg = load_config({"profile": "cpu", "learner": {"algorithm": "alphazero"}, **doc})
        return run_id(compute_identity(cfg, engine=None, obs_digest="o", action_digest="a", codec_table_digest="t",
                                       device_kind="cpu", torch_version="t"))

    assert rid({"alphazero": {"full_search_share": 1.0}}) == rid({})
    assert rid({"alphazero": {"full_search_share": 0.5}}) != rid({})
    # at 1 no coin is drawn: every choice row is proposed, and the row has no playout-cap key
    book = SearchBook(c_scale=0.1, candidates=2, master_seed=5)

    def no_coin(*_):
        raise AssertionError("a coin drawn at share 1")

    book.full_search = no_coin  # type: ignore[method-assign]
    req = _propose(book, 1, 0, np.arange(10))
    assert req["search_slots"].tolist() == list(range(10)) and not book.fast
    assert not {"search/fast_decisions", "search/full_frac"} & set(book.row(1.0, 10))


@pytest.mark.parametrize("share", [0.0, -0.5, 1.5])
def test_a_share_outside_zero_one_is_refused_naming_the_field(share):
    with pytest.raises((ValueError, msgspec.ValidationError, SystemExit), match="full_search_share"):
        load_config({"profile": "cpu", "alphazero": {"full_search_share": share}})
