"""What a resume refuses, and why: a run that would not reproduce, a checkpoint no metric row
describes, a rollout on another engine build, a checkpoint of another run identity."""

from __future__ import annotations

import json
import time

import msgspec
import pytest
import zmq

from services.learner import checkpointing
from services.learner.rounds import Collector
from services.learner.fleet import Fleet
from services.learner.service import DeterminismError, apply_determinism
from shared import transport
from shared.config import load_config
from shared.identity import compute_identity
from shared.messages import Decoder, EngineBuild, Hello, Refused, ToLearner, ToRollout, Welcome
from tests.stack import Up, free_ports, read_rows, tiny_config

ENGINE = EngineBuild(engine_class="royalegym.rust_engine.RustEngine", calibration_digest="c", build_digest="b",
                     binary_sha256="e42383517b50bfe1", cards_digest="k", royalegym_version="0.1.25")


def test_run_exact_refuses_unpinned_blas_threads_naming_the_variable(monkeypatch):
    cfg = load_config({"profile": "tiny"})  # run_exact, 1 thread
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    with pytest.raises(DeterminismError, match="OMP_NUM_THREADS=1"):
        apply_determinism(cfg, "cpu")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    assert apply_determinism(cfg, "cpu") == {"tier": "run_exact", "torch_threads": 1}
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    throughput = load_config({"profile": "tiny", "determinism": {"tier": "throughput"}})
    assert apply_determinism(throughput, "cpu")["tier"] == "throughput"  # opt-in: no refusal


def meta(iteration: int, digest: str) -> checkpointing.CheckpointMeta:
    cfg = load_config({"profile": "tiny"})
    ident = compute_identity(cfg, engine=ENGINE, obs_digest="o", action_digest="a",
                             codec_table_digest="t", device_kind="cpu:x86_64", torch_version="2.14.1")
    return checkpointing.CheckpointMeta(iteration=iteration, run_id="r", state_digest=digest,
                                        counters=checkpointing.Counters(iteration, 0, 0, 0), identity=ident, config=cfg)


def test_a_checkpoint_no_row_of_its_iteration_describes_is_refused(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"run/iteration": 2, "run/state_digest": "aaaa"}, {"run/iteration": 3, "run/state_digest": "bbbb"},
        {"run/iteration": 3, "run/state_digest": "cccc"}]) + "\n{\"run/iteration\": 4, \"run/sta")  # torn last line
    ok, why = checkpointing.described(meta(3, "dddd"), str(path))
    assert not ok and "dddd" in why and "bbbb, cccc" in why
    assert checkpointing.described(meta(3, "cccc"), str(path)) == (True, "")  # a rewritten iteration: any row
    ok, note = checkpointing.described(meta(4, "eeee"), str(path))
    assert ok and "no metric row of iteration 4" in note  # only a torn line: cannot compare, let through
    assert checkpointing.described(meta(5, "x"), str(tmp_path / "absent.jsonl"))[0]


def test_a_rollout_on_another_engine_build_is_refused_naming_both():
    port = free_ports(1)[0]
    server = transport.bind_router(f"tcp://127.0.0.1:{port}")
    said = []
    collector = Collector(server, Decoder(ToLearner), Fleet(), lambda codec: None, ENGINE, said.append)
    client = transport.connect_dealer(f"tcp://127.0.0.1:{port}")
    try:
        other = msgspec.structs.replace(ENGINE, binary_sha256="04d42611db5d6e5a")
        transport.send(client, Hello(instance="x1", host="h", pid=1, battles=2, shards=1, engine=other))
        deadline = time.monotonic() + 10
        while not said and time.monotonic() < deadline:
            collector.poll(100, lambda *a: None)
        assert client.poll(5000, zmq.POLLIN)
        _, reply, _ = transport.recv(client, Decoder(ToRollout))
        assert isinstance(reply, Refused)
        assert "binary 04d42611db5d6e5a" in reply.reason and "binary e42383517b50bfe1" in reply.reason
        assert collector.fleet.members == {}
    finally:
        client.close(0)
        server.close(0)


@pytest.mark.slow
def test_a_resume_across_an_identity_change_is_refused_unless_drift_is_allowed(tmp_path):
    runs = tmp_path / "runs"
    first = tiny_config(runs)
    up = Up(first, "--iterations", "1")
    assert up.wait_exit(240) == 0, "\n".join(up.lines[-20:])
    # Same run folder, another master seed and another clip range: both are in the identity.
    doc = json.loads(first.read_text())
    doc.update(master_seed=7, ppo={"clip_range": 0.1})
    changed = runs / "changed.json"
    changed.write_text(json.dumps(doc))
    refused = Up(changed, "--iterations", "1")
    assert refused.wait_exit(240) != 0
    text = "\n".join(refused.lines)
    # refused by `up` itself against the run's config.json (royalefleet/start_config.py), before
    # any service starts; the learner's own refusal against the checkpoint is the same rule
    assert "refusing to start run 'default' with options that change its run identity" in text
    assert "  master_seed: 20260921 -> 7\n" in text and "  ppo.clip_range: 0.2 -> 0.1\n" in text
    assert "algo_digest" in text and "--allow-identity-drift" in text
    assert len(read_rows(runs / "default")) == 1  # nothing trained on top of the refused checkpoint

    drift = Up(changed, "--iterations", "2", "--allow-identity-drift")
    assert drift.wait_exit(240) == 0, "\n".join(drift.lines[-20:])
    rows = read_rows(runs / "default")
    assert rows[-1]["run/iteration"] == 2 and rows[-1]["run/resumed_with_drift"] == 1
    record = json.loads((runs / "default" / "drift.json").read_text().splitlines()[-1])
    assert record["iteration"] == 1 and "master_seed" in record["fields"]
