"""services.ladder.pool: admission, gate decisions, eviction, the atomic file, refusals; and the
fit the ladder reads (current_ratings / Standings)."""

from __future__ import annotations

import json
import os

import msgspec
import pytest

from services.ladder.gate import GateDecision
from services.ladder.pool import Candidate, PoolCorrupt, PoolState, current_ratings, member_id, pool_path
from services.ladder.rating import table_from_ratings
from services.ladder.results import ResultLog
from services.ladder.standings import Standings
from shared.config import RaterConfig
from shared.messages import EpisodeRecord

SEED, C1, C2, C3, C4 = (member_id(f"{k:016x}") for k in (0xA0, 0xA1, 0xA2, 0xA3, 0xA4))


def cand(cid: str, steps: int = 4_000_000, iteration: int = 7) -> Candidate:
    return Candidate(id=cid, env_steps=steps, iteration=iteration)


def decision(cid: str, verdict: str, champion: str = SEED) -> GateDecision:
    return GateDecision(candidate=cid, champion=champion, admit=verdict in ("promote", "admit_cycle"),
                        promote=verdict == "promote", cycle=verdict == "admit_cycle", verdict=verdict, conditions=[])


@pytest.fixture
def pool(tmp_path):
    return PoolState.load(pool_path(tmp_path, "run"))


# ----------------------------------------------------------------------------- admission


def test_the_first_candidate_enters_free_and_becomes_champion(pool):
    assert pool.members == [] and pool.champion is None and pool.version == 0
    assert pool.submit(cand(SEED, steps=123, iteration=1)) == "admitted_free"
    assert pool.members == [SEED] and pool.archive == [SEED] and pool.champions == [SEED]
    assert pool.champion == SEED and pool.champion_env_steps == 123 and pool.version == 1
    assert pool.pending == [] and pool.gates_run == 0 and pool.anchor_record == {}  # its anchors are still to play


def test_a_later_candidate_waits_for_a_gate(pool):
    pool.submit(cand(SEED))
    assert pool.submit(cand(C1, steps=8_000_000, iteration=60)) == "pending"
    assert pool.pending == [Candidate(id=C1, env_steps=8_000_000, iteration=60)]
    assert pool.members == [SEED] and pool.archive == [SEED] and pool.champion == SEED and pool.version == 1


def test_a_duplicate_is_refused_and_changes_nothing(pool):
    pool.submit(cand(SEED))
    pool.submit(cand(C1))
    pool.submit(cand(C2))
    pool.resolve(C2, decision(C2, "discard"))
    before = msgspec.json.encode(pool._stored())
    for cid in (SEED, C1, C2):  # admitted, pending, discarded (a failed candidate is never retried)
        assert pool.submit(cand(cid, steps=1)) == "duplicate"
    assert msgspec.json.encode(pool._stored()) == before


@pytest.mark.parametrize("cid, named", [
    ("0123456789abcdef", "expected snap:<snapshot_id>"),
    ("snap:0123", "snapshot_id '0123' is not a snapshot content id"),
    ("snap:0123456789ABCDEF", "16 lowercase hex"),
])
def test_a_bad_id_is_refused_by_name(pool, cid, named):
    with pytest.raises(ValueError, match=named):
        pool.submit(cand(cid))
    assert pool.members == [] and pool.pending == []


def test_negative_counters_are_refused(pool):
    with pytest.raises(ValueError, match="env_steps -1 and iteration 0 must be >= 0"):
        pool.submit(cand(SEED, steps=-1, iteration=0))


# ----------------------------------------------------------------------------- gate decisions


def test_promote_admits_and_crowns(pool):
    pool.submit(cand(SEED))
    pool.submit(cand(C1, steps=8_000_000))
    pool.consecutive_gate_failures = 2
    pool.resolve(C1, decision(C1, "promote"))
    assert pool.members == [SEED, C1] and pool.archive == [SEED, C1]
    assert pool.champion == C1 and pool.champions == [SEED, C1] and pool.champion_env_steps == 8_000_000
    assert (pool.gates_run, pool.gates_passed, pool.consecutive_gate_failures) == (1, 1, 0)
    assert pool.pending == [] and pool.cycle == [] and pool.version == 2


def test_admit_cycle_admits_with_the_flag_and_keeps_the_champion(pool):
    pool.submit(cand(SEED))
    pool.submit(cand(C1))
    pool.resolve(C1, decision(C1, "admit_cycle"))
    assert pool.members == [SEED, C1] and pool.cycle == [C1] and pool.champion == SEED
    assert (pool.gates_run, pool.gates_passed, pool.consecutive_gate_failures) == (1, 0, 1)


def test_discard_drops_the_candidate_and_counts_a_failure(pool):
    pool.submit(cand(SEED))
    pool.submit(cand(C1))
    pool.submit(cand(C2))
    pool.resolve(C1, decision(C1, "discard"))
    pool.resolve(C2, decision(C2, "discard"))
    assert pool.members == [SEED] and pool.archive == [SEED] and pool.discarded == [C1, C2]
    assert (pool.gates_run, pool.gates_passed, pool.consecutive_gate_failures) == (2, 0, 2)
    assert pool.pending == [] and pool.version == 1


def test_resolve_refusals_change_nothing(pool):
    pool.submit(cand(SEED))
    pool.submit(cand(C1))
    before = msgspec.json.encode(pool._stored())
    with pytest.raises(ValueError, match=f"candidate '{C2}' is not pending \\(pending: {C1}\\)"):
        pool.resolve(C2, decision(C2, "promote"))
    with pytest.raises(ValueError, match=f"the decision is about '{C2}', not '{C1}'"):
        pool.resolve(C1, decision(C2, "promote"))
    with pytest.raises(ValueError, match="verdict 'incomplete' decides nothing; play the missing games"):
        pool.resolve(C1, decision(C1, "incomplete"))
    assert msgspec.json.encode(pool._stored()) == before


# ----------------------------------------------------------------------------- eviction


def test_eviction_trims_the_sampler_never_the_archive(tmp_path):
    pool = PoolState.load(pool_path(tmp_path, "run"), working_size=3)
    pool.submit(cand(SEED))
    for cid in (C1, C2, C3):
        pool.submit(cand(cid))
    pool.resolve(C1, decision(C1, "promote"))
    pool.resolve(C2, decision(C2, "admit_cycle", champion=C1))
    assert pool.members == [SEED, C1, C2] and pool.version == 3
    # Elo: seed 0, C1 100, C2 150, C3 300. SEED and C1 are protected (seed, champion); of C2
    # (interior: removing it leaves a 100..300 hole) and C3 (an extreme), the interior one goes,
    # even cycle-flagged (its hole counts double, but an extreme is only ever removed last).
    ratings = table_from_ratings({SEED: 0.0, C1: 100.0, C2: 150.0, C3: 300.0})
    pool.resolve(C3, decision(C3, "admit_cycle", champion=C1), ratings=ratings)
    assert pool.members == [SEED, C1, C3]
    assert pool.archive == [SEED, C1, C2, C3] and set(pool.admitted) == set(pool.archive)
    assert pool.version == 5  # the admission, then the eviction


def test_eviction_never_removes_the_champion_chain_or_the_seed(tmp_path):
    pool = PoolState.load(pool_path(tmp_path, "run"), working_size=2)
    pool.submit(cand(SEED))
    champion = SEED
    for cid in (C1, C2, C3):
        pool.submit(cand(cid))
        pool.resolve(cid, decision(cid, "promote", champion=champion))
        champion = cid
    # Every member is the seed or a champion: protection wins and the sampler stays over size.
    assert pool.members == [SEED, C1, C2, C3] and pool.champion == C3
    pool.submit(cand(C4))
    pool.resolve(C4, decision(C4, "admit_cycle", champion=C3), ratings=table_from_ratings({}))
    assert pool.members == [SEED, C1, C2, C3]  # the one unprotected member went (unrated: first)
    assert pool.archive == [SEED, C1, C2, C3, C4]


def test_eviction_without_ratings_reads_the_fit_beside_the_pool(tmp_path):
    """No table passed: the pool fits the result log next to pool.json (here none: every
    unprotected member is unrated, so the oldest goes first)."""
    pool = PoolState.load(pool_path(tmp_path, "run"), working_size=2, rater=RaterConfig())
    pool.submit(cand(SEED))
    for cid in (C1, C2):
        pool.submit(cand(cid))
        pool.resolve(cid, decision(cid, "admit_cycle"))
    assert pool.members == [SEED, C2] and pool.archive == [SEED, C1, C2]


# ----------------------------------------------------------------------------- the file


def test_save_is_atomic_and_survives_a_reload(tmp_path):
    path = pool_path(tmp_path, "run")
    pool = PoolState.load(path)
    pool.submit(cand(SEED, steps=10, iteration=1))
    pool.submit(cand(C1))
    pool.submit(cand(C2))
    pool.resolve(C1, decision(C1, "admit_cycle"))
    pool.set_anchor_record(SEED, {"scripted:noop": 0.75, "scripted:random_legal": 0.5})
    pool.save()
    assert sorted(os.listdir(path.parent)) == ["pool.json"]  # no temporary file left behind
    again = PoolState.load(path)
    assert again._stored() == pool._stored()
    assert again.pending == [cand(C2)] and again.cycle == [C1] and again.champion == SEED
    assert again.anchor_record == {SEED: {"scripted:noop": 0.75, "scripted:random_legal": 0.5}}


def test_a_failed_save_leaves_the_old_file(tmp_path, monkeypatch):
    path = pool_path(tmp_path, "run")
    pool = PoolState.load(path)
    pool.submit(cand(SEED))
    pool.save()
    old = path.read_bytes()
    pool.submit(cand(C1))

    def refuse(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        pool.save()
    assert path.read_bytes() == old and sorted(os.listdir(path.parent)) == ["pool.json"]


def good_file(tmp_path) -> tuple:
    path = pool_path(tmp_path, "run")
    pool = PoolState.load(path)
    pool.submit(cand(SEED))
    pool.save()
    return path, json.loads(path.read_text())


@pytest.mark.parametrize("damage, named", [
    (lambda d: b'{"format_version": 1, "members": [', "truncated|unexpected end|Input data was truncated"),
    (lambda d: {**d, "members": [C1]}, f"members names '{C1}', which the archive does not hold"),
    (lambda d: {**d, "champion": None}, "the archive holds members but there is no champion"),
    (lambda d: {**d, "memebrs": []}, "unknown field `memebrs`"),
    (lambda d: {**d, "format_version": 9}, "format_version 9; this build reads 1"),
    (lambda d: {**d, "gates_passed": 3}, "inconsistent"),
])
def test_a_corrupt_pool_is_refused_naming_the_file_and_the_fix(tmp_path, damage, named):
    path, data = good_file(tmp_path)
    bad = damage(data)
    path.write_bytes(bad if isinstance(bad, bytes) else json.dumps(bad).encode())
    written = path.read_bytes()
    with pytest.raises(PoolCorrupt) as info:
        PoolState.load(path)
    text = str(info.value)
    assert text.startswith(f"{path}: not a readable pool state (")
    assert "it is not reset: restore it from a backup" in text and "Moving it aside starts an EMPTY pool" in text
    assert any(n in text for n in named.split("|")), text
    assert path.read_bytes() == written  # never rewritten, never reset


def test_anchor_record_refusals(pool):
    pool.submit(cand(SEED))
    with pytest.raises(ValueError, match=f"'{C1}' was never admitted"):
        pool.set_anchor_record(C1, {"scripted:noop": 0.5})
    with pytest.raises(ValueError, match="score 1.5 must be in 0..1"):
        pool.set_anchor_record(SEED, {"scripted:noop": 1.5})
    assert pool.anchor_record == {}


# ----------------------------------------------------------------------------- the fit


def eval_record(a: str, b: str, outcome: int, battle: int, ordinal: int = 0, job: int = 1, seat: str = "blue",
                role: str = "eval") -> EpisodeRecord:
    return EpisodeRecord(battle=battle, ordinal=ordinal, seat=seat, role=role, player=a, opponent=b, outcome=outcome,
                         truncated=False, episode_steps=50, episode_ticks=500, own_crowns=0, enemy_crowns=0,
                         own_tower_hp_frac=1.0, enemy_tower_hp_frac=1.0, elixir_leak_steps=0,
                         elixir_count_exact=True, cards_played=3, undiscounted_return=0.0, iteration=job)


def test_current_ratings_fit_the_eval_games_only(tmp_path):
    rater = RaterConfig(draws="half_win")
    assert current_ratings(tmp_path, "run", rater) is None  # no log
    log = ResultLog.for_run(tmp_path, "run")
    log.append([eval_record("learner", "scripted:noop", 1, battle=b, role="scripted") for b in range(5)])
    assert current_ratings(tmp_path, "run", rater) is None  # training games are never fitted
    # SEED beats noop 3 of 4 (both seats of each battle logged: one game each).
    games = [(1, 0), (1, 1), (-1, 2), (1, 3)]
    log.append([eval_record(SEED, "scripted:noop", o, battle=b) for o, b in games]
               + [eval_record("scripted:noop", SEED, -o, battle=b, seat="red") for o, b in games])
    table = current_ratings(tmp_path, "run", rater)
    assert table.players == ["scripted:noop", SEED] and table.records == 4
    assert table.observed(SEED, "scripted:noop") == 0.75 and table.ratings["scripted:noop"] == 0.0
    assert table.ratings[SEED] > 0


def test_standings_follow_the_log_and_refit_only_on_new_eval_games(tmp_path):
    rater = RaterConfig(draws="half_win")
    log = ResultLog.for_run(tmp_path, "run")
    st = Standings(log.path, rater)
    assert st.table() is None and st.fits == 0
    log.append([eval_record(SEED, "scripted:noop", 1, battle=0), eval_record("scripted:noop", SEED, -1, 0, seat="red")])
    first = st.table()
    assert st.eval_games == 1 and st.fits == 1 and first.records == 1
    log.append([eval_record("learner", "scripted:noop", 1, battle=9, role="pool")])
    assert st.table() is first and st.fits == 1  # a training record: no refit
    with open(log.path, "ab") as fh:  # a torn, unterminated line is not read yet
        fh.write(b'{"run_name": "run", "wal')
    assert st.refresh() == 0
    log.append([eval_record(SEED, C1, -1, battle=1)])  # append() ends the torn line first
    table = st.table()
    assert st.eval_games == 2 and st.fits == 2
    assert msgspec.json.encode(table) == msgspec.json.encode(current_ratings(tmp_path, "run", rater))
