"""The update benchmark's helpers: the synthetic iteration built from real battles (shapes,
forced rows exactly as collection leaves them, a realistic forced fraction), the like-for-like
notes of the comparison table, and the CLI flag. No timing is asserted."""

import msgspec
import numpy as np
import pytest
import torch

from royalefleet.bench.update import (
    FORCED_FRAC_TOLERANCE, head, legal_counts, real_rows, run_update_bench, synthetic_update_data, unlike,
    update_speed, update_table,
)
from services.learner.ppo import _check_data
from shared.preflight import run_preflight
from shared.config import EnvConfig, profile
from shared.nn.model import ActorCritic
from shared.nn.policy import Policy

N_ROWS = 600  # ~1.5 battles of play, both seats


@pytest.fixture(scope="module")
def batch():
    pf = run_preflight(EnvConfig(), 7)
    rows = real_rows(EnvConfig(), pf.codec, N_ROWS)
    model = ActorCritic(pf.spec, profile("tiny").net, seed=3)
    policy = Policy(model, pf.codec, torch.device("cpu"))
    n_legal = legal_counts(rows, pf.codec)
    return pf, rows, n_legal, synthetic_update_data(policy, rows, n_legal)


def test_real_rows_are_packed_rows_of_the_codec(batch):
    pf, rows, n_legal, _ = batch
    assert rows.shape == (N_ROWS, pf.codec.row_bytes) and rows.dtype == np.uint8
    assert n_legal.shape == (N_ROWS,) and n_legal.dtype == np.int32
    masks = pf.codec.unpack(rows)["mask"]
    np.testing.assert_array_equal(n_legal, masks.sum(axis=1))  # the learner's popcount = the unpacked mask
    assert masks[:, 0].all()  # the no-op is always legal
    assert len(np.unique(rows, axis=0)) > N_ROWS // 2  # distinct states of play, not one array seen twice
    np.testing.assert_array_equal(real_rows(EnvConfig(), pf.codec, 7), rows[:7])  # seeded; odd counts stop mid-decision


def test_forced_fraction_is_realistic(batch):
    # Play that spends elixir the moment it arrives leaves ~90 % of rows with only the no-op
    # (0.935 measured); the scripted anchor's 0.9 no-op play would give ~0.4.
    _, _, n_legal, _ = batch
    forced = float((n_legal == 1).mean())
    assert 0.85 <= forced <= 0.97, forced
    assert (n_legal >= 1).all()


def test_synthetic_data_is_what_collection_leaves(batch):
    pf, rows, n_legal, data = batch
    assert _check_data(data) == N_ROWS  # forced rows hold action 0 at log-prob exactly 0.0
    choice = n_legal > 1
    masks = pf.codec.unpack(rows)["mask"]
    assert masks[np.flatnonzero(choice), data.actions[choice]].all()  # sampled actions are legal
    assert (data.old_log_probs[choice] < 0).all()
    assert (data.actions[~choice] == 0).all() and (data.old_log_probs[~choice] == 0.0).all()
    np.testing.assert_array_equal(data.returns, data.old_values + data.advantages)
    for name in ("actions", "old_log_probs", "advantages", "returns", "old_values", "n_legal"):
        assert len(getattr(data, name)) == N_ROWS
    obs = data.fetch(np.array([0, 5, 9]))
    assert obs["spatial"].shape[0] == 3 and obs["mask"].shape == (3, pf.spec.n_actions)


def test_head_keeps_the_first_rows_and_the_fetch(batch):
    *_, data = batch
    part = head(data, 10)
    np.testing.assert_array_equal(part.actions, data.actions[:10])
    np.testing.assert_array_equal(part.n_legal, data.n_legal[:10])
    assert part.fetch is data.fetch and len(part.returns) == 10


def test_refusals_name_the_value(batch):
    pf, rows, n_legal, _ = batch
    with pytest.raises(ValueError, match="n_rows must be at least 1, got 0"):
        real_rows(EnvConfig(), pf.codec, 0)
    with pytest.raises(ValueError, match="600 rows but 599 legal counts"):
        synthetic_update_data(None, rows, n_legal[:-1])


def test_update_speed_on_the_tiny_profile():
    cfg = profile("tiny")
    cfg = msgspec.structs.replace(cfg, determinism=msgspec.structs.replace(cfg.determinism, tier="throughput"))
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        out = update_speed(cfg, batches=2)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    assert out["rows"] == 2 * cfg.ppo.batch_size == 128
    assert out["forced_frac"] == 1.0 - out["choice_rows"] / 128
    assert out["optimizer_steps"] == 2 * cfg.ppo.n_epochs  # 128 // 64 batches an epoch
    assert out["rows_per_s"] == pytest.approx(128 / out["seconds"])
    assert out["choice_rows_per_s"] == pytest.approx(out["choice_rows"] / out["seconds"])
    assert (out["device"], out["dtype"]) == ("cpu", "float32")  # no GPU here: the CPU, in float32


# ----------------------------------------------------------------------------- the table


OURS = dict(rows=1024, choice_rows=74, forced_frac=0.927734375, batch_size=1024, minibatch_size=256, epochs=3,
            timed_epochs=3, optimizer_steps=3, channels=32, blocks=1, actor_params=107588, critic_params=175617,
            forced_rows="critic_only", dtype="float32", threads=2, tier="run_exact", fill=True, seconds=8.0,
            rows_per_s=128.0, choice_rows_per_s=9.25)


def ref(**changes):
    return OURS | dict(actor_params=107716, critic_params=175713) | changes


def test_same_sizes_and_settings_are_like_for_like():
    # 283,429 vs our 283,205 parameters: within PARAMS_TOLERANCE (2 %) at the same channels and blocks.
    assert unlike(OURS, ref()) == []
    assert unlike(OURS, ref(forced_frac=OURS["forced_frac"] + FORCED_FRAC_TOLERANCE / 2)) == []


def test_each_difference_is_named():
    notes = unlike(OURS, ref(channels=64, blocks=4, actor_params=438020, critic_params=486721, forced_rows="all",
                             forced_frac=0.875, timed_epochs=1, threads=1, fill=False))
    assert notes == [
        "threads 1 vs our 2",
        "network 64ch x 4 blocks, 924,741 parameters vs our 32ch x 1, 283,205",
        "actor runs on every row, ours on choice rows only",
        "forced fraction 0.875 vs our 0.928",
        "run_exact, memory fill off vs our run_exact, memory fill on",
        "timed over 1 of its 3 epochs, seconds scaled to 3",
    ]


def test_a_throughput_tier_is_named_without_fill():
    assert unlike(OURS, ref(tier="throughput", fill=False)) == ["throughput vs our run_exact, memory fill on"]


def test_same_sizes_but_far_apart_parameters_are_named():
    notes = unlike(OURS, ref(actor_params=200000))
    assert notes == ["network 32ch x 1 blocks, 375,713 parameters vs our 32ch x 1, 283,205"]


def test_table_has_one_column_a_side_and_a_verdict_per_reference():
    lines = update_table(OURS, [("ref, our size", ref()), ("ref, its net", ref(forced_rows="all"))])
    assert lines[0].split() == ["ours", "ref,", "our", "size", "ref,", "its", "net"]
    row = next(x for x in lines if x.startswith("update rows/s"))
    assert row.split()[-3:] == ["128.0", "128.0", "128.0"]
    assert lines[-2] == "ref, our size: like for like"
    assert lines[-1] == "ref, its net: NOT like for like: actor runs on every row, ours on choice rows only"


def test_cli_takes_the_update_flags():
    from royalefleet.cli import build_parser

    args = build_parser().parse_args(["bench", "--update-only", "--update-batches", "4", "--reference", "all"])
    assert (args.update_only, args.update_batches, args.reference) == (True, 4, "all")
    args = build_parser().parse_args(["bench"])
    assert (args.update_only, args.update_batches, args.reference) == (False, 1, "our-size")


def test_an_unknown_reference_choice_is_refused():
    with pytest.raises(ValueError, match="reference 'both': choose one of our-size, all, none"):
        run_update_bench(profile("tiny"), reference="both")
