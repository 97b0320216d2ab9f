"""The learner under faults (issue 12): a ghost rollout, a ladder that does not answer, a run
whose checkpoints do not verify, a torn last row, a disk that refuses every save."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import msgspec
import pytest
import zmq
from prometheus_client import CollectorRegistry, Counter

from services.learner.rounds import Collector
from services.learner.fleet import Fleet, Member
from services.learner.collection import JOIN_WAIT_S, wait_for_rollouts
from services.learner.parts import IterationState
from shared import transport
from shared.config import load_config
from shared.messages import Decoder, EngineBuild, Heartbeat, Hello, ProtocolError, Rejoin, ToLadder, ToLearner, ToRollout
from tests.stack import Up, free_ports, read_rows, run_to_exit, tiny_config

ENGINE = EngineBuild(engine_class="royalegym.rust_engine.RustEngine", calibration_digest="c", build_digest="b",
                     binary_sha256="e42383517b50bfe1", cards_digest="k", royalegym_version="0.1.25")


# ----------------------------------------------------------------------------- item 5: ghost rollouts


def test_forget_unready_forgets_only_members_past_the_deadline_that_never_said_ready():
    fleet = Fleet()
    now = 1000.0
    ghost = Member("ghost", b"g", 2, 1, "h", 1, registered=now - 31)
    slow = Member("slow", b"s", 2, 1, "h", 2, registered=now - 29)
    ready = Member("ready", b"r", 2, 1, "h", 3, registered=now - 500, ready=True)
    for m in (ghost, slow, ready):
        fleet.add(m)
    assert fleet.forget_unready(30.0, now) == [ghost]
    assert ghost.lost and not slow.lost and not ready.lost
    assert (fleet.forgotten_total, fleet.lost_total) == (1, 1)
    assert fleet.forget_unready(30.0, now) == []  # counted once
    assert fleet.forget_unready(30.0, now + 2) == [slow] and fleet.forgotten_total == 2
    assert [m.instance for m in fleet.arrange()] == ["ready"]


def _hello(client, instance: str, pid: int) -> None:
    transport.send(client, Hello(instance=instance, host="h", pid=pid, battles=2, shards=1, engine=ENGINE))


def test_a_boundary_does_not_wait_for_a_rollout_killed_while_building():
    """A rollout that said Hello and was killed before it said ready (a ghost): the boundary
    after its join wait forgets it (counted, said) and starts at once with the ready one;
    the ghost, should it speak again, is told to rejoin. Before the fix every boundary waited
    JOIN_WAIT_S (30 s) for it."""
    port = free_ports(1)[0]
    server = transport.bind_router(f"tcp://127.0.0.1:{port}")
    said: list[str] = []
    fleet = Fleet()
    collector = Collector(server, Decoder(ToLearner), fleet, lambda codec: None, ENGINE, said.append)
    live, ghost = (transport.connect_dealer(f"tcp://127.0.0.1:{port}") for _ in range(2))
    registry = CollectorRegistry()
    state = IterationState(first_iteration=False)
    forgotten = Counter("forgotten", "x", registry=registry)
    try:
        _hello(live, "live", 1)
        _hello(ghost, "ghost", 2)
        deadline = time.monotonic() + 10
        while len(fleet.members) < 2 and time.monotonic() < deadline:
            collector.poll(100, lambda *a: None)
        transport.send(live, Heartbeat(instance="live", state="ready"))
        while not fleet.members["live"].ready and time.monotonic() < deadline:
            collector.poll(100, lambda *a: None)
        fleet.members["ghost"].registered -= JOIN_WAIT_S + 1  # said Hello a join wait ago, never ready since
        t0 = time.monotonic()
        members = wait_for_rollouts(collector, state, min_rollouts=1,
                                    round_timeout_s=load_config({"profile": "tiny"}).rollout.round_timeout_s,
                                    forgotten=forgotten, say=said.append)
        waited = time.monotonic() - t0
        assert [m.instance for m in members] == ["live"]
        assert waited < 5.0, f"the boundary waited {waited:.1f} s for a ghost"
        assert fleet.forgotten_total == 1 and registry.get_sample_value("forgotten_total") == 1
        assert any(s.startswith("learner: forgot rollout ghost@h:2") for s in said), said
        # the ghost, alive after all, speaks: it is told to rejoin (and joins again, built).
        transport.send(ghost, Heartbeat(instance="ghost", state="ready"))
        collector.poll(500, lambda *a: None)
        assert ghost.poll(5000, zmq.POLLIN)
        replies = []
        while ghost.poll(200, zmq.POLLIN):
            try:
                replies.append(transport.recv(ghost, Decoder(ToRollout))[1])
            except ProtocolError:
                pass  # the Welcome of this test's learner is a stub (None)
        assert isinstance(replies[-1], Rejoin) and replies[-1].instance == "ghost"
    finally:
        for s in (live, ghost):
            s.close(0)
        server.close(0)


# ----------------------------------------------------------------------------- items 6, 7, 8 on a real stack


def _corrupt(folder: Path) -> None:
    """Flip one byte of the actor's weights: same size, wrong sha256."""
    f = folder / "actor" / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.write_bytes(bytes(data))


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_torn_row_fallback_and_corrupt_checkpoints_on_a_real_stack(tmp_path):
    """Items 7 and 6 on a tiny stack (every iteration checkpointed):

    - a corrupt newest checkpoint: the learner says which file failed and resumes the older one;
    - the row of that older checkpoint's iteration, torn, comes back byte for byte;
    - every checkpoint corrupt: `resume` exits 2 naming each one and its file and changes no
      byte of the run folder; `--start-fresh` then starts it over."""
    cfg = tiny_config(tmp_path / "runs", checkpoint={"every_iterations": 1})
    run = tmp_path / "runs" / "default"
    up, code = run_to_exit(cfg, "--iterations", "3", timeout=240)
    assert code == 0, up.tail()
    first, second, third = (run / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    # row 2's write cut half-way (a full disk), row 3 appended after it; checkpoint 3 corrupt
    (run / "metrics.jsonl").write_bytes(first + second[: len(second) // 2] + third)
    _corrupt(run / "checkpoints" / "00000003")

    up, code = run_to_exit(cfg, "--iterations", "3", timeout=240)  # a total: resumed at 2, iteration 3 again
    assert code == 0, up.tail()
    said = [s for s in up.lines if "skipped a newer checkpoint that does not verify" in s]  # item 6: the fallback
    assert said and "00000003: actor/model.safetensors: sha256" in said[0], up.tail()
    assert any("resumed iteration 2 " in s for s in up.lines)
    # item 7: the torn row of the checkpoint resumed comes back, byte for byte
    assert any("the metric row of iteration 2 was missing from metrics.jsonl; restored from" in s for s in up.lines), up.tail()
    lines = (run / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    assert lines[1] == second and [json.loads(x)["run/iteration"] for x in lines] == [1, 2, 3]

    for folder in (run / "checkpoints").iterdir():
        if folder.is_dir():
            _corrupt(folder)
    before = _tree(run)
    up, code = run_to_exit(cfg, "--iterations", "1", timeout=240)
    assert code == 2, up.tail()
    out = "\n".join(up.lines)
    assert "refusing to start run 'default': it has 3 checkpoint(s) and none verifies" in out, up.tail()
    for it in (1, 2, 3):
        assert f"{it:08d}: actor/model.safetensors: sha256" in out
    after = _tree(run)
    assert {k: v for k, v in after.items() if not k.startswith("logs/")} == \
        {k: v for k, v in before.items() if not k.startswith("logs/")}, "the refused start changed the run folder"

    up, code = run_to_exit(cfg, "--start-fresh", "--iterations", "1", timeout=240)
    assert code == 0, up.tail()
    assert any("starting run 'default' over (--start-fresh)" in s for s in up.lines), up.tail()
    assert [r["run/iteration"] for r in read_rows(run)] == [1]
    # the new checkpoint replaces the corrupt one of its iteration and is the newest in the index
    index = json.loads((run / "checkpoints" / "index.json").read_text())
    assert [e["iteration"] for e in index["entries"]] == [2, 3, 1]
    assert any("checkpoint of iteration 1 written" in s for s in up.lines)


@pytest.mark.slow
def test_saves_that_keep_failing_halt_the_learner_without_a_bundle(tmp_path):
    """Item 8: a checkpoint folder that cannot be written (here a file where the folder goes,
    as a full disk refuses every write) fails every save; after checkpoint.max_failed_saves (2)
    in a row the learner halts (exit 3) with halted.json and no bundle, instead of training on."""
    cfg = tiny_config(tmp_path / "runs", checkpoint={"every_iterations": 2})
    run = tmp_path / "runs" / "default"
    up = Up(cfg, "--iterations", "6")
    try:
        up.wait_for(lambda s: "no checkpoint for run 'default'; starting fresh" in s, 120, "the learner's start")
        (run / "checkpoints").write_text("not a folder\n")  # every save from now on fails
        code = up.wait_exit(240)
    finally:
        if up.proc.poll() is None:
            up.kill()
    assert code == 3, up.tail()
    assert [r["run/iteration"] for r in read_rows(run)] == [1, 2, 3, 4]
    failed = sorted({s for s in up.lines if "NOT written after 3 attempts" in s})  # the launcher repeats the tail
    assert len(failed) == 2 and "2 failed save(s) in a row" in failed[1], up.tail()
    assert any("2 checkpoint saves in a row failed (checkpoint.max_failed_saves = 2); the run has no checkpoint" in s
               for s in up.lines)
    mark = json.loads((run / "halted.json").read_text())
    assert mark["iteration"] == 4 and "2 checkpoint saves in a row failed" in mark["reason"]
    assert not (run / "bundles").exists()


# ----------------------------------------------------------------------------- item 4: a silent ladder


@pytest.mark.slow
def test_a_stopped_ladder_costs_no_iteration_and_no_episode(tmp_path):
    """Item 4: the ladder stopped (SIGSTOP) right after a metric row: the learner does not
    die of the plan request's timeout; it collects with assignments drawn over the last pool,
    holds the finished episodes, and once the ladder runs again (SIGCONT) every iteration's
    episodes are in the result log, each exactly once."""
    cfg = tiny_config(tmp_path / "runs", services={"request_timeout_s": 3.0})
    run = tmp_path / "runs" / "default"
    up = Up(cfg, "--iterations", "7")
    ladder = None
    try:
        up.wait_for(lambda s: s.startswith("it    2 "), 240, "iteration 2")
        ladder = next(pid for pid, cmd in up.children().items() if "services.ladder" in cmd)
        os.kill(ladder, signal.SIGSTOP)
        up.wait_for(lambda s: "the ladder did not answer the plan request" in s, 60, "the plan request to time out")
        up.wait_for(lambda s: s.startswith("it    5 "), 120, "iteration 5 without the ladder")
        os.kill(ladder, signal.SIGCONT)
        ladder = None
        code = up.wait_exit(240)
    finally:
        if ladder is not None:
            os.kill(ladder, signal.SIGCONT)
        if up.proc.poll() is None:
            up.kill()
    assert code == 0, up.tail()
    assert any("the ladder answers again" in s for s in up.lines), up.tail()
    rows = read_rows(run)
    assert [r["run/iteration"] for r in rows] == list(range(1, 8))
    assert max(r["health/episodes_held"] for r in rows) > 0 and rows[-1]["health/episodes_held"] == 0
    records = [json.loads(x)["record"] for x in (run / "ladder" / "results.jsonl").read_text().splitlines()]
    keys = [(r["battle"], r["ordinal"], r["seat"]) for r in records]
    assert len(keys) == len(set(keys)), "an episode was written twice"
    for row in rows:  # every learner seat-episode of every iteration reached the result log
        mine = [r for r in records if r["iteration"] == row["run/iteration"] and r["player"] == "learner"]
        assert len(mine) == row.get("env/episodes", 0), (row["run/iteration"], len(mine), row.get("env/episodes"))
    assert not (run / "episodes.held.jsonl").exists()


def test_a_client_keeps_the_late_reply_of_a_timed_out_request():
    """What makes a held episode report exactly-once: the Ack of a report that timed out is
    kept when it comes late (then the batch is not sent again), and a request answered after
    it with no Ack for it means it was lost (then it is)."""
    from shared.messages import Ack, FromLadder, ReportEpisodes

    port = free_ports(1)[0]
    server = transport.bind_router(f"tcp://127.0.0.1:{port}")
    client = transport.Client(f"tcp://127.0.0.1:{port}", Decoder(FromLadder), name="ladder", timeout_s=0.3)
    try:
        first = ReportEpisodes(request_id=client.next_id(), run_name="r", episodes=[])
        with pytest.raises(transport.ServiceTimeout):
            client.request(first)
        assert client.late_reply(first.request_id) is None and not client.answered_after(first.request_id)
        identity, got, _ = transport.recv(server, Decoder(ToLadder), router=True)
        transport.send(server, Ack(request_id=got.request_id, count=0), identity=identity)  # served late
        second = ReportEpisodes(request_id=client.next_id(), run_name="r", episodes=[])

        def serve_second():
            ident, body, _ = transport.recv(server, Decoder(ToLadder), router=True)
            transport.send(server, Ack(request_id=body.request_id, count=7), identity=ident)

        import threading

        t = threading.Thread(target=lambda: (server.poll(5000), serve_second()))
        t.start()
        reply, _ = client.request(second, timeout_s=5)
        t.join()
        assert reply.count == 7 and client.answered_after(first.request_id)
        late = client.late_reply(first.request_id)
        assert isinstance(late, Ack) and late.request_id == first.request_id
        assert client.late_reply(first.request_id) is None  # taken once
    finally:
        client.close()
        server.close(0)
