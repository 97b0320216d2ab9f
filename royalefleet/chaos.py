"""``royalefleet chaos``: a `tiny` stack under faults, and the promises checked afterwards.

It starts ``royalefleet up`` (the real launcher, as a user runs it) on free loopback ports in a
scratch folder, lets it train, and then plays a schedule drawn from ``--seed``: at least
``--kills`` SIGKILLs spread over every service (checkpoint, ladder, learner, both rollouts, the
evaluator), interleaved with the faults of ``FAULTS`` that are on, and after each kill a burst
of hostile messages to one socket. Then it stops the stack with Ctrl-C and checks:

- every service is alive, or was restarted, when the schedule ends (and the stack exits 0);
- ``metrics.jsonl`` holds exactly one row per iteration, 1..N, in order;
- every checkpoint the index keeps verifies, file by file;
- the ladder's result log has no torn line (every line whole JSON, newline-ended);
- every hostile message was refused and counted: the service's
  ``royalefleet_*_messages_refused_total{reason}`` grew by exactly what was sent, per reason,
  on the same process.

A fault whose fix has not landed yet (``Fault.needs_item``, issue 12's numbering) is listed but
off; ``--faults`` turns on any by name (``--list-faults`` prints them). Figures (kills survived,
messages refused, iterations retrained) are printed at the end; docs/reliability.md quotes a
run. Deterministic in its schedule (the seed), not in the stack's timing: every check is one
that must hold whatever the timing.
"""

from __future__ import annotations

import argparse

import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from royalefleet import chaos_mid_step
from royalefleet.procfs import children_of
from shared.algorithms import ALGORITHMS, algorithm_names
from shared.run_dir import RunDir

KINDS = ("checkpoint", "ladder", "learner", "rollout", "evaluator")
ROLLOUTS = 2
EVALUATORS = 1
REQUEST_TIMEOUT_S = 5.0
"""``services.request_timeout_s`` of the chaos stack: a request to a killed peer is retried
after 5 s instead of 30, so a run of a dozen kills fits in CI (the retry path is the same)."""
MAX_MESSAGE_MB = 2
"""``services.max_message_mb`` of the chaos stack: a message over it (``oversized``) costs a few
MB to send, not 150 (tiny's largest message, a checkpoint, is 0.7 MB)."""
SEARCHED = tuple(spec.name for spec in ALGORITHMS if spec.searches)
"""``learner.algorithm``s whose rollouts search and ask the learner questions mid-step (their
declarations say so, shared/algorithms.py): the mid-question kills (royalefleet/chaos_mid_step.py)
are on for these."""
SEARCH = {"candidates": 4, "depth": 6, "leaf_value": "critic"}
"""The searched chaos stack's ``alphazero`` section, as tests/system/test_expert_iteration_stack.py's:
the critic values every leaf (a ``LeafQuery`` each searched step) and network opponents act in
the simulations (``SimActQuery``s, ``sim_opponent`` "battle", the default); an algorithm's own
section keeps its defaults."""
STARTUP_S = 180.0
"""How long anything may take to come (back) up on a loaded 2-core machine."""


@dataclass
class Figures:
    kills: int = 0
    restarts: int = 0
    refused_sent: dict = field(default_factory=dict)  # service -> messages sent that must be refused
    refused_counted: dict = field(default_factory=dict)  # service -> growth of its refusal counter
    iterations: int = 0
    retrained: int = 0
    faults: list = field(default_factory=list)
    seconds: float = 0.0
    mid_question: dict = field(default_factory=lambda: {"rollout": [], "learner": []})
    """kind -> seconds from each kill that landed during a mid-step question to the next row."""
    mid_question_tries: int = 0
    """Freezes of the learner it took to catch those questions outstanding."""


@dataclass(frozen=True)
class Fault:
    name: str
    what: str
    inject: Callable[["Chaos"], None]
    needs_item: int | None = None
    """Issue 12's item whose fix this fault needs (off by default until it lands); None: on."""
    kills_learner: bool = False
    """It ends with the learner's SIGKILL: it takes one of the schedule's learner kills."""
    needs_search: bool = False
    """Only for a searched ``learner.algorithm`` (``SEARCHED``): on by default there, refused elsewhere."""


class ChaosError(AssertionError):
    pass


# ============================================================================ the stack under test


class Chaos:
    def __init__(self, folder: Path, seed: int, say=print, algorithm: str = "ppo",
                 round_timeout_s: float | None = None):
        from royalefleet.launcher import on_free_ports
        from shared.config import load_config

        self.folder, self.say, self.rng = folder, say, random.Random(seed)
        self.seed, self.algorithm = seed, algorithm
        services = on_free_ports(load_config({"profile": "tiny"}).services)
        doc = {"profile": "tiny", "runs_dir": str(folder / "runs"), "run_name": "chaos",
               "services": {k: getattr(services, k) for k in (
                   "learner_port", "ladder_port", "checkpoint_port", "learner_metrics_port", "ladder_metrics_port",
                   "checkpoint_metrics_port", "learner_halt_port")}
               | {"rollout_metrics_port": 0, "evaluator_metrics_port": 0, "request_timeout_s": REQUEST_TIMEOUT_S,
                  "max_message_mb": MAX_MESSAGE_MB},
               "local": {"rollouts": ROLLOUTS, "evaluators": EVALUATORS}}
        if algorithm != "ppo":
            doc["learner"] = {"algorithm": algorithm}
        if round_timeout_s is not None:  # tiny's is 10 s; the default 30 s
            doc["rollout"] = {"round_timeout_s": round_timeout_s}
        if algorithm in SEARCHED:  # the rollouts' metrics on: the mid-question kills read them
            doc["services"]["rollout_metrics_port"] = free_port_run(ROLLOUTS)
            doc["alphazero"] = SEARCH
        folder.mkdir(parents=True, exist_ok=True)
        self.config_path = folder / "chaos-config.json"
        self.config_path.write_text(json.dumps(doc, indent=1))
        self.cfg = load_config(str(self.config_path))
        self.run_dir = folder / "runs" / "chaos"
        self.out_path = folder / "launcher.out"
        self.halt_token = f"chaos-{seed}-{os.getpid()}-{secrets.token_hex(8)}"  # >= MIN_TOKEN_CHARS
        """The learner's halt endpoint is on (``ROYALEFLEET_HALT_TOKEN``), for ``halt_junk``."""
        self.proc: subprocess.Popen | None = None
        self._out = None
        self.figures = Figures()
        self.problems: list[str] = []

    # ------------------------------------------------------------------ processes

    def start(self, doctor: bool = True) -> None:
        """``royalefleet up`` of the chaos config; ``doctor=False``: without its machine checks
        (``--no-doctor``, as the stack tests start it)."""
        self._out = open(self.out_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "royalefleet", "up", "--config", str(self.config_path),
                                      *(() if doctor else ("--no-doctor",))],
                                     stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=os.environ | {"PYTHONUNBUFFERED": "1",
                                                       "ROYALEFLEET_HALT_TOKEN": self.halt_token})

    def lines(self) -> list[str]:
        return self.out_path.read_text(errors="replace").splitlines()

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.lines()[-n:])

    def children(self) -> dict[int, str]:
        """pid -> service kind of the launcher's live children."""
        out = {}
        for pid, (state, argv) in children_of(self.proc.pid).items():
            if state == "Z":
                continue
            for part in argv:
                if part.startswith(b"services."):
                    out[pid] = part.decode().split(".")[1]
        return out

    def pids(self, kind: str) -> list[int]:
        return sorted(p for p, k in self.children().items() if k == kind)

    def wait_for(self, what: str, predicate, timeout: float = STARTUP_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ChaosError(f"the stack exited ({self.proc.returncode}) while waiting for {what}:\n{self.tail()}")
            value = predicate()
            if value:
                return value
            time.sleep(0.1)
        raise ChaosError(f"timed out after {timeout:.0f} s waiting for {what}:\n{self.tail()}")

    def all_up(self) -> bool:
        kinds = list(self.children().values())
        return all(kinds.count(k) == n for k, n in
                   (("checkpoint", 1), ("ladder", 1), ("learner", 1), ("rollout", ROLLOUTS), ("evaluator", EVALUATORS)))

    def rows(self) -> list[dict]:
        path = RunDir(self.run_dir).metrics
        if not path.exists():
            return []
        out = []
        for line in path.read_bytes().split(b"\n"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a torn last line (the next resume moves it out)
        return out

    def last_iteration(self) -> int:
        rows = self.rows()
        return rows[-1]["run/iteration"] if rows else 0

    def wait_rows(self, more: int) -> None:
        target = self.last_iteration() + more
        self.wait_for(f"iteration {target}", lambda: self.last_iteration() >= target)

    def kill(self, kind: str, sig=signal.SIGKILL) -> int:
        pids = self.wait_for(f"a live {kind}", lambda: self.pids(kind))
        pid = self.rng.choice(pids)
        os.kill(pid, sig)
        if sig == signal.SIGKILL:
            self.figures.kills += 1
        return pid

    def stop(self) -> int:
        """Ctrl-C, as a user stops it; the launcher's exit code."""
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            self.problems.append(f"the stack did not stop within 240 s of Ctrl-C:\n{self.tail()}")
            self.abort()
            return -1

    def abort(self) -> None:
        if self.proc is None:
            return
        for pid in self.children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self._out is not None:
            self._out.close()

    # ------------------------------------------------------------------ refusal counters

    def metrics_port(self, service: str) -> int:
        return getattr(self.cfg.services, f"{service}_metrics_port")

    def refused(self, service: str) -> dict[str, float] | None:
        """``royalefleet_<service>_messages_refused_total`` by reason, or None if not answering."""
        from prometheus_client.parser import text_string_to_metric_families

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port(service)}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        for fam in text_string_to_metric_families(text):
            if fam.name == f"royalefleet_{service}_messages_refused":
                return {s.labels["reason"]: s.value for s in fam.samples if s.name.endswith("_total")}
        return {}

    def endpoint(self, service: str) -> str:
        return f"tcp://127.0.0.1:{getattr(self.cfg.services, f'{service}_port')}"


def free_port_run(n: int) -> int:
    """A loopback port p with p .. p + n - 1 free now (the launcher gives rollout k port p + k)."""
    import socket

    for _ in range(200):
        socks = [socket.socket()]
        try:
            socks[0].bind(("127.0.0.1", 0))
            base = socks[0].getsockname()[1]
            for k in range(1, n):
                socks.append(socket.socket())
                socks[-1].bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise ChaosError(f"no {n} consecutive free loopback ports found in 200 tries")


# ============================================================================ hostile messages


def must_refuse(rng: random.Random, service: str, run_name: str,
                max_bytes: int = MAX_MESSAGE_MB << 20) -> list[tuple[str, list[bytes]]]:
    """(reason, frames) of messages refused whatever their random bytes, one of each reason
    given before a message reaches a handler: undecodable, version, unknown_kind, frames,
    arrays, nesting (shared/messages.py ``Decoder``) and oversized (``transport.recv_frames``:
    frames each under ``max_bytes``, together over it)."""
    import msgspec

    from shared.messages import PROTOCOL_VERSION, ArrayMeta, EvalJobRequest, Heartbeat, LoadLatest, encode

    enc = msgspec.msgpack.Encoder()
    valid = {"learner": Heartbeat(instance="chaos", state="ready"),
             "ladder": EvalJobRequest(request_id=1, worker="chaos"),
             "checkpoint": LoadLatest(request_id=1, run_name=run_name)}[service]
    envelope = encode(valid)[0]
    noise = rng.randbytes(rng.randint(1, 300))
    out = [
        ("undecodable", [b"\xc1" + noise]),  # 0xc1 is never a msgpack byte
        ("undecodable", [envelope[:rng.randint(1, len(envelope) - 1)]]),  # a valid envelope cut short
        ("version", [enc.encode({"protocol": PROTOCOL_VERSION + 1 + rng.randint(0, 99), "body": noise,
                                 "arrays": []})]),
        ("unknown_kind", [enc.encode({"protocol": PROTOCOL_VERSION, "body": msgspec.Raw(enc.encode(
            {"type": "chaos_" + noise.hex()[:8], "request_id": 1})), "arrays": []})]),
        ("frames", [envelope, noise]),  # one frame more than the header lists
        ("arrays", [enc.encode({"protocol": PROTOCOL_VERSION, "body": msgspec.Raw(enc.encode(valid)),
                                "arrays": [ArrayMeta("chaos", "uint8", [len(noise)])]}), noise]),  # no such array
        ("nesting", [enc.encode({"protocol": PROTOCOL_VERSION, "body": msgspec.Raw(
            b"\x91" * rng.randint(3000, 6000) + b"\xc0"), "arrays": []})]),  # 5 KB of nested arrays
        ("oversized", [envelope] + [rng.randbytes(64) * (max_bytes // 2 // 64)] * 3),  # 3 frames of half the limit
    ]
    rng.shuffle(out)
    return out


def hostile_burst(chaos: Chaos, service: str, copies: int = 5, tries: int = 3) -> None:
    """``copies`` of every must-refuse message to ``service``'s socket; its refusal counter must
    grow by exactly that, reason by reason, with no restart in between (same pid). A service
    that restarts meanwhile (the learner after an earlier kill of the ladder, say) voids the
    count: the burst is sent again, up to ``tries`` times, and only a service that never
    survives one is a problem."""
    for attempt in range(1, tries + 1):
        problem = _burst(chaos, service, copies)
        if problem is None:
            return
        if not problem.startswith("restarted"):
            chaos.problems.append(problem)
            return
    chaos.problems.append(f"{service} did not survive {tries} bursts of hostile messages in a row")


def _burst(chaos: Chaos, service: str, copies: int) -> str | None:
    """One burst; None when every refusal was counted, else what went wrong."""
    import zmq

    pid = chaos.wait_for(f"a live {service}", lambda: chaos.pids(service))[0]
    before = chaos.wait_for(f"{service} metrics", lambda: chaos.refused(service))
    messages = [m for _ in range(copies) for m in must_refuse(chaos.rng, service, chaos.cfg.run_name)]
    sent: dict[str, float] = {}
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.connect(chaos.endpoint(service))
    try:
        for reason, frames in messages:
            sock.send_multipart(frames)
            sent[reason] = sent.get(reason, 0) + 1
        grown: dict[str, float] = {}

        def counted():
            now = chaos.refused(service)
            if now is None:
                return False
            grown.clear()
            grown.update({r: now.get(r, 0) - before.get(r, 0) for r in set(now) | set(before)})
            grown_nonzero = {r: v for r, v in grown.items() if v}
            return grown_nonzero == sent or sum(grown.values()) > sum(sent.values())

        try:
            chaos.wait_for(f"{service} to count {sum(sent.values()):.0f} refusals", counted, timeout=20)
        except ChaosError:
            pass
        time.sleep(0.3)  # none more may come
        counted()
    finally:
        sock.close()
    if chaos.pids(service) != [pid]:
        return f"restarted: {service} (pid {pid}) during {len(messages)} hostile messages"
    grown_nonzero = {r: v for r, v in grown.items() if v}
    chaos.figures.refused_sent[service] = chaos.figures.refused_sent.get(service, 0) + sum(sent.values())
    chaos.figures.refused_counted[service] = chaos.figures.refused_counted.get(service, 0) + sum(grown_nonzero.values())
    if grown_nonzero != sent:
        return f"{service}: sent {sent} messages that must be refused; its refusal counter grew by {grown_nonzero}"
    return None


# ============================================================================ faults


def _stop_learner_then(chaos: Chaos, action: Callable[[], None]) -> None:
    """Freeze the learner, do ``action`` to its files, then SIGKILL it: what a crash at that
    point leaves behind (the launcher restarts it and it resumes)."""
    pid = chaos.kill("learner", signal.SIGSTOP)
    try:
        action()
    finally:
        os.kill(pid, signal.SIGKILL)
        chaos.figures.kills += 1


def torn_tail(chaos: Chaos) -> None:
    """A crash in the middle of writing a row: half a row of the next iteration at the end."""
    path = RunDir(chaos.run_dir).metrics

    def tear():
        with open(path, "ab") as fh:
            fh.write(b'{"run/iteration": ' + str(chaos.last_iteration() + 1).encode() + b', "run/tim')

    _stop_learner_then(chaos, tear)


def corrupt_newest_checkpoint(chaos: Chaos) -> None:
    """The newest checkpoint's actor weights damaged on disk, then a crash: the resume falls
    back to the one before (and says why), and trains the iterations since again."""

    def damage():
        index = json.loads((RunDir(chaos.run_dir).checkpoint_index).read_text())
        newest = RunDir(chaos.run_dir).checkpoints / index["entries"][-1]["name"] / "actor" / "model.safetensors"
        data = bytearray(newest.read_bytes())
        data[-16:] = bytes(16)
        newest.write_bytes(bytes(data))

    _stop_learner_then(chaos, damage)


def ladder_pause(chaos: Chaos, seconds: float = 3.0) -> None:
    """The ladder frozen (SIGSTOP) for a few seconds, shorter than a request's timeout."""
    pid = chaos.kill("ladder", signal.SIGSTOP)
    time.sleep(seconds)
    os.kill(pid, signal.SIGCONT)


def ladder_pause_past_timeout(chaos: Chaos) -> None:
    """The ladder frozen right after a metric row for longer than a request's timeout
    (issue 12 item 4): the learner must wait and retry, not crash."""
    chaos.wait_rows(1)
    learner = chaos.pids("learner")
    ladder_pause(chaos, REQUEST_TIMEOUT_S + 3.0)
    chaos.wait_rows(1)
    if chaos.pids("learner") != learner:
        chaos.problems.append("ladder_pause_past_timeout: the learner was restarted (it crashed on the silent ladder)")


def _send(chaos: Chaos, service: str, body, arrays=None):
    """One message to ``service`` from a fresh DEALER; the reply body or None after 5 s."""
    from shared import transport
    from shared.messages import Decoder, FromCheckpoint, FromLadder

    decoder = Decoder({"ladder": FromLadder, "checkpoint": FromCheckpoint}[service])
    client = transport.Client(chaos.endpoint(service), decoder, name=service, timeout_s=5.0)
    try:
        reply, _ = client.request(body, arrays)
        return reply
    except transport.ServiceTimeout:
        return None
    finally:
        client.close()


def absurd_hello(chaos: Chaos) -> None:
    """A Hello claiming 50,000 battles, then a ready heartbeat (issue 12 item 3): refused at Hello."""
    from shared import transport
    from shared.messages import Hello, Heartbeat
    from shared.preflight import run_preflight

    engine = run_preflight(chaos.cfg.env, chaos.cfg.master_seed).engine
    pid = chaos.pids("learner")
    before = chaos.wait_for("learner metrics", lambda: chaos.refused("learner"))
    sock = transport.connect_dealer(chaos.endpoint("learner"))
    try:
        transport.send(sock, Hello(instance="chaos-absurd", host="chaos", pid=1, battles=50_000, shards=1,
                                   engine=engine))
        time.sleep(0.5)
        transport.send(sock, Heartbeat(instance="chaos-absurd", state="ready"))
        chaos.wait_rows(2)
    finally:
        sock.close(0)
    after = chaos.refused("learner") or {}
    if chaos.pids("learner") != pid:
        chaos.problems.append("absurd_hello: the learner did not survive a Hello of 50,000 battles")
    elif after.get("hello", 0) - before.get("hello", 0) < 1:
        chaos.problems.append(f"absurd_hello: no refusal counted under reason hello ({before} -> {after})")


def ghost_rollout(chaos: Chaos) -> None:
    """A rollout that says Hello and dies before it is ready (issue 12 item 5): forgotten after a
    deadline, so iteration boundaries do not wait for it every time."""
    from shared import transport
    from shared.messages import Hello
    from shared.preflight import run_preflight

    engine = run_preflight(chaos.cfg.env, chaos.cfg.master_seed).engine
    sock = transport.connect_dealer(chaos.endpoint("learner"))
    transport.send(sock, Hello(instance="chaos-ghost", host="chaos", pid=1, battles=4, shards=2, engine=engine))
    time.sleep(0.5)
    sock.close(0)
    # One boundary may wait for it (the join wait, 30 s); then it is forgotten, said, and no
    # later boundary waits for it again.
    chaos.wait_for("the learner to forget the ghost",
                   lambda: any("forgot rollout chaos-ghost" in line for line in chaos.lines()), timeout=120)
    t0 = time.monotonic()
    chaos.wait_rows(2)
    per = (time.monotonic() - t0) / 2
    if per > 20.0:
        chaos.problems.append(f"ghost_rollout: iterations took {per:.0f} s each after the ghost was forgotten")


def nan_record(chaos: Chaos) -> None:
    """An episode record with NaN and infinite numbers (issue 12 item 9): refused before the ack."""
    from shared.messages import Ack, EpisodeRecord, ReportEpisodes

    rec = EpisodeRecord(battle=0, ordinal=10**6, seat="blue", role="mirror", player="learner", opponent="learner",
                        outcome=0, truncated=True, episode_steps=1, episode_ticks=1, own_crowns=0, enemy_crowns=0,
                        own_tower_hp_frac=float("nan"), enemy_tower_hp_frac=float("inf"), elixir_leak_steps=0,
                        elixir_count_exact=True, cards_played=0, undiscounted_return=float("nan"))
    reply = _send(chaos, "ladder", ReportEpisodes(request_id=7, run_name=chaos.cfg.run_name, episodes=[rec]))
    if isinstance(reply, Ack) or reply is None:
        chaos.problems.append(f"nan_record: the ladder answered {type(reply).__name__} to a NaN record")


def unauthenticated_save(chaos: Chaos) -> None:
    """A SaveCheckpoint from a client that is not the run's learner (issue 12 item 10): refused,
    and nothing pruned."""
    import numpy as np

    from shared.messages import SaveCheckpoint, Saved

    reply = _send(chaos, "checkpoint", SaveCheckpoint(request_id=9, run_name=chaos.cfg.run_name, iteration=10**6,
                                                      names=["x"], meta=b"{}"), {"x": np.zeros(4, np.uint8)})
    if isinstance(reply, Saved) or reply is None:
        chaos.problems.append(f"unauthenticated_save: the checkpoint service answered {type(reply).__name__} to a "
                              "save from a stranger")
    elif _newest_checkpoint(chaos) == 10**6 or (RunDir(chaos.run_dir).checkpoint(10**6)).exists():
        chaos.problems.append("unauthenticated_save: the stranger's checkpoint was written")


def halt_junk(chaos: Chaos) -> None:
    """The learner's halt endpoint (issue 12 item 12) under requests that must never halt it: a
    wrong token, ``Content-Length: abc`` and ``-1``, a body shorter than its length, and 40
    connections left idle. The learner trains on (same process, no halt record)."""
    import socket

    port, token = chaos.cfg.services.learner_halt_port, chaos.halt_token
    pid = chaos.pids("learner")

    def request(head: str, body: bytes = b"", close_after: float = 0.0) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(head.encode() + b"\r\n" + body)
            time.sleep(close_after)
            try:
                s.recv(1024)
            except OSError:
                pass

    auth = f"Authorization: Bearer {token}\r\n"
    junk = [
        ("POST /halt HTTP/1.1\r\nAuthorization: Bearer wrong\r\nContent-Length: 2\r\n", b"{}"),
        ("POST /halt HTTP/1.1\r\n" + auth + "Content-Length: abc\r\n", b"{}"),
        ("POST /halt HTTP/1.1\r\n" + auth + "Content-Length: -1\r\n", b"{}"),
        ("POST /halt HTTP/1.1\r\n" + auth + "Content-Length: 100\r\n", b'{"reason": "cut'),
    ]
    idle = []
    try:
        for _ in range(40):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    except OSError:
        pass  # a bounded server may refuse connections past its cap: that is the point
    for head, body in junk:
        try:
            request(head, body)
        except OSError:
            pass
    for s in idle:
        s.close()
    chaos.wait_rows(1)
    if chaos.pids("learner") != pid or (RunDir(chaos.run_dir).halted).exists():
        chaos.problems.append("halt_junk: the learner halted or died on malformed halt requests")


def torn_checkpointed_row(chaos: Chaos) -> None:
    """The last row cut in half by a crash after its checkpoint was written (issue 12 item 7):
    the resume restores that iteration's row from the checkpoint."""
    path = RunDir(chaos.run_dir).metrics

    def tear():
        data = path.read_bytes()
        last = data.rstrip(b"\n").rfind(b"\n") + 1
        path.write_bytes(data[:last + (len(data) - last) // 2])

    chaos.wait_for("a checkpoint of the last row", lambda: _newest_checkpoint(chaos) == chaos.last_iteration())
    _stop_learner_then(chaos, tear)


def _newest_checkpoint(chaos: Chaos) -> int:
    try:
        return json.loads((RunDir(chaos.run_dir).checkpoint_index).read_text())["entries"][-1]["iteration"]
    except (OSError, ValueError, IndexError, KeyError):
        return -1


FAULTS: tuple[Fault, ...] = (
    Fault("ladder_pause", "the ladder SIGSTOPped for 3 s, then SIGCONT", ladder_pause),
    Fault("torn_tail", "the learner killed mid-row: half a row at the end of metrics.jsonl", torn_tail,
          kills_learner=True),
    Fault("corrupt_newest_checkpoint", "the newest checkpoint's weights damaged, then the learner killed",
          corrupt_newest_checkpoint, kills_learner=True),
    Fault("absurd_hello", "a Hello of 50,000 battles, then ready: refused at Hello, counted", absurd_hello),
    Fault("ladder_pause_past_timeout", "the ladder SIGSTOPped past the request timeout after a row",
          ladder_pause_past_timeout),
    Fault("ghost_rollout", "a rollout that says Hello and dies before ready", ghost_rollout),
    Fault("torn_checkpointed_row", "the last row torn after its checkpoint, then the learner killed",
          torn_checkpointed_row, kills_learner=True),
    Fault("nan_record", "an episode record with NaN and inf to the ladder: refused before the ack", nan_record),
    Fault("unauthenticated_save", "a SaveCheckpoint from a stranger: refused, nothing pruned", unauthenticated_save),
    Fault("halt_junk", "malformed and unauthorized requests and 40 idle connections to the halt endpoint",
          halt_junk),
    Fault("rollout_mid_question", "a rollout SIGKILLed while its searched step waits for the learner's answer",
          chaos_mid_step.rollout_mid_question, needs_search=True),
    Fault("learner_mid_question", "the learner SIGKILLed with a rollout's mid-step question unanswered",
          chaos_mid_step.learner_mid_question, kills_learner=True, needs_search=True),
)
"""Hostile messages (``must_refuse``) and the SIGKILLs are not in this table: they are always on."""


def default_faults(algorithm: str = "ppo") -> list[str]:
    """The faults on for a run of ``algorithm``: those whose fix has landed, the mid-question
    kills only where the rollouts search."""
    return [f.name for f in FAULTS if f.needs_item is None and (algorithm in SEARCHED or not f.needs_search)]


# ============================================================================ the run


def schedule(rng: random.Random, kills: int, faults: list[str]) -> list[tuple[str, str]]:
    """The events in order: ("kill", kind), ("hostile", service) and ("fault", name). Kills
    cover every kind (rollouts twice as often: there are two), in a shuffled order with no kind
    twice in a row; a learner kill is played by a fault that ends with one while any is left
    (so the learner is not killed more often than the schedule says: ``GIVE_UP_QUICK_EXITS``
    quick exits in a row would make the launcher give up, rightly); a hostile burst after every
    kill, to the three sockets in turn; the other faults spread evenly between."""
    by_name = {f.name: f for f in FAULTS}
    pool = ["checkpoint", "ladder", "learner", "rollout", "rollout", "evaluator"]
    kinds = (pool * (kills // len(pool) + 1))[:max(kills, len(pool))]
    for _ in range(1000):
        rng.shuffle(kinds)
        if all(a != b for a, b in zip(kinds, kinds[1:])):
            break
    killing = [f for f in faults if by_name[f].kills_learner]
    others = [f for f in faults if not by_name[f].kills_learner]
    learner_slots = kinds.count("learner")
    if len(killing) > learner_slots:  # more learner-killing faults than learner kills: one kill each
        kinds += ["learner"] * (len(killing) - learner_slots)
    gap = max(1, len(kinds) // (len(others) + 1))
    events: list[tuple[str, str]] = []
    for i, kind in enumerate(kinds):
        if kind == "learner" and killing:
            events.append(("fault", killing.pop(0)))
        else:
            events.append(("kill", kind))
        events.append(("hostile", ("learner", "ladder", "checkpoint")[i % 3]))
        if others and (i + 1) % gap == 0:
            events.append(("fault", others.pop(0)))
    events += [("fault", name) for name in others]
    return events


def run_chaos(folder: Path, *, seed: int = 1, kills: int = 12, faults: list[str] | None = None,
              say=print, algorithm: str = "ppo", round_timeout_s: float | None = None) -> tuple[Figures, list[str]]:
    """Run the schedule on a fresh `tiny` stack of ``learner.algorithm`` ``algorithm`` in
    ``folder``; (figures, problems found). Raises ValueError naming an unknown fault, or a
    mid-question fault asked of an algorithm whose rollouts do not search. ``round_timeout_s``:
    the stack's ``rollout.round_timeout_s`` (None: tiny's 10 s)."""
    faults = default_faults(algorithm) if faults is None else faults
    by_name = {f.name: f for f in FAULTS}
    unknown = [f for f in faults if f not in by_name]
    if unknown:
        raise ValueError(f"unknown fault(s) {unknown}; known: {', '.join(by_name)}")
    unsearched = [f for f in faults if by_name[f].needs_search and algorithm not in SEARCHED]
    if unsearched:
        raise ValueError(f"fault(s) {unsearched} need rollouts that search: --algorithm {algorithm!r} asks no "
                         f"mid-step questions; use one of {', '.join(SEARCHED)}")
    chaos = Chaos(folder, seed, say, algorithm, round_timeout_s)
    events = schedule(chaos.rng, kills, faults)
    t0 = time.monotonic()
    chaos.start()
    try:
        chaos.wait_for("the first two iterations", lambda: chaos.last_iteration() >= 2)
        n_kills = sum(e[0] == "kill" or (e[0] == "fault" and by_name[e[1]].kills_learner) for e in events)
        say(f"chaos: {algorithm}, seed {seed}, {n_kills} SIGKILLs, faults {', '.join(faults) or 'none'}")
        for what, arg in events:
            chaos.wait_for("every service up", chaos.all_up)
            time.sleep(chaos.rng.uniform(0.2, 1.2))
            if what == "kill":
                pid = chaos.kill(arg)
                say(f"chaos: {time.monotonic() - t0:5.0f} s  SIGKILL {arg} (pid {pid})")
            elif what == "hostile":
                hostile_burst(chaos, arg)
            else:
                say(f"chaos: {time.monotonic() - t0:5.0f} s  fault {arg}: {by_name[arg].what}")
                by_name[arg].inject(chaos)
                chaos.figures.faults.append(arg)
        chaos.wait_for("every service up after the schedule", chaos.all_up)
        chaos.wait_rows(2)  # it trains on
        code = chaos.stop()
        if code != 0:
            chaos.problems.append(f"the stack exited {code} after Ctrl-C:\n{chaos.tail()}")
    except ChaosError as exc:
        chaos.problems.append(str(exc))
        chaos.abort()
    finally:
        if chaos.proc is not None and chaos.proc.poll() is None:
            chaos.abort()
        chaos.close()
    chaos.figures.seconds = time.monotonic() - t0
    check_run(chaos)
    return chaos.figures, chaos.problems


def check_run(chaos: Chaos) -> None:
    """The promises, read from the run folder and the launcher's output."""
    from services.checkpoint.store import CheckpointStore

    f, problems = chaos.figures, chaos.problems
    lines = chaos.lines()
    f.restarts = sum("restarting it" in line for line in lines)
    if f.restarts < f.kills:
        problems.append(f"{f.kills} kills but {f.restarts} restarts announced by the launcher")
    raw = (RunDir(chaos.run_dir).metrics).read_bytes() if (RunDir(chaos.run_dir).metrics).exists() else b""
    if raw and not raw.endswith(b"\n"):
        problems.append("metrics.jsonl ends in a torn line")
    rows = chaos.rows()
    its = [r["run/iteration"] for r in rows]
    f.iterations = len(its)
    if its != list(range(1, len(its) + 1)):
        problems.append(f"metrics.jsonl is not one row per iteration: {its}")
    # Iterations trained twice: at each resume, the rows written past the checkpoint it resumed.
    last = 0
    for line in lines:
        if line.startswith("it ") and line[3:8].strip().isdigit():
            last = int(line[3:8])
        elif line.startswith("learner: resumed iteration "):
            resumed = int(line.split()[3])
            f.retrained += max(0, last - resumed)
            last = resumed
    entries = CheckpointStore(RunDir(chaos.run_dir).checkpoints, say=lambda s: None).list_entries()
    if not entries:
        problems.append("no checkpoint kept")
    for e in entries:
        if not e.ok:
            problems.append(f"checkpoint {e.name} (iteration {e.iteration}) does not verify: {e.problem}")
    results = RunDir(chaos.run_dir).results
    data = results.read_bytes() if results.exists() else b""
    if not data:
        problems.append("the ladder's result log is empty")
    elif not data.endswith(b"\n"):
        problems.append("the ladder's result log ends in a torn line")
    for k, line in enumerate(data.splitlines()):
        try:
            json.loads(line)
        except ValueError:
            problems.append(f"results.jsonl line {k + 1} is torn: {line[:80]!r}")
            break


def describe(f: Figures) -> str:
    sent, counted = int(sum(f.refused_sent.values())), int(sum(f.refused_counted.values()))
    per = ", ".join(f"{s} {int(n)}" for s, n in sorted(f.refused_counted.items()))
    mid = ""
    if any(f.mid_question.values()):
        mid = "; kills during a mid-step question: " + ", ".join(
            f"{kind} {len(s)} (next row after {', '.join(f'{x:.0f}' for x in s)} s)"
            for kind, s in f.mid_question.items() if s) + f", caught in {f.mid_question_tries} freeze(s) of the learner"
    return (f"{f.kills} SIGKILLs survived ({f.restarts} restarts); {counted} of {sent} hostile messages refused and "
            f"counted ({per}); {f.iterations} iterations, one row each; {f.retrained} iteration(s) retrained after "
            f"resumes; faults: {', '.join(f.faults) or 'none'}{mid}; {f.seconds:.0f} s")


# ============================================================================ command line


def add_parser(sub) -> None:
    p = sub.add_parser("chaos", help="run a tiny stack under SIGKILLs, faults and hostile messages, and check it held",
                       description="\n\n".join(__doc__.split("\n\n")[1:3]).replace("``", ""),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1, help="draws the schedule (default 1)")
    p.add_argument("--kills", type=int, default=12, help="SIGKILLs at least, over every service (default 12)")
    p.add_argument("--faults", default="default",
                   help="comma-separated fault names, 'default' (those whose fix has landed) or 'all'")
    p.add_argument("--algorithm", default="ppo", choices=algorithm_names(),
                   help=f"the stack's learner.algorithm (default ppo); under {', '.join(SEARCHED)} the "
                        "rollouts search and the faults add kills during their mid-step questions")
    p.add_argument("--mid-question-kills", type=int, default=1, metavar="N",
                   help="under a searched --algorithm, play each mid-question fault (rollout_mid_question, "
                        "learner_mid_question) N times (default 1)")
    p.add_argument("--round-timeout", type=float, default=None, metavar="S",
                   help="the stack's rollout.round_timeout_s (default tiny's 10 s; the config default is 30)")
    p.add_argument("--list-faults", action="store_true", help="print the faults and exit")
    p.add_argument("--keep", metavar="DIR", help="run in DIR and keep it (default: a temporary folder, removed)")
    p.set_defaults(func=cmd_chaos)


def cmd_chaos(args) -> int:
    import shutil

    if args.list_faults:
        for f in FAULTS:
            state = "on" if f.needs_item is None else f"off until issue 12 item {f.needs_item} is fixed"
            state = f"on under {', '.join(SEARCHED)}" if f.needs_search and f.needs_item is None else state
            print(f"{f.name:<28} {state:<38} {f.what}")
        return 0
    every = [f.name for f in FAULTS if args.algorithm in SEARCHED or not f.needs_search]
    names = {"default": default_faults(args.algorithm), "all": every}.get(
        args.faults, [x for x in args.faults.split(",") if x])
    if args.kills < 1 or args.mid_question_kills < 0 or (args.round_timeout is not None and args.round_timeout <= 0):
        print("royalefleet chaos: --kills must be at least 1, --mid-question-kills at least 0 and --round-timeout "
              "above 0", file=sys.stderr)
        return 2
    by_name = {f.name: f for f in FAULTS}
    names = [n for n in names if not (n in by_name and by_name[n].needs_search)] + [
        n for n in names if n in by_name and by_name[n].needs_search] * args.mid_question_kills
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="royalefleet-chaos-"))
    try:
        figures, problems = run_chaos(folder, seed=args.seed, kills=args.kills, faults=names,
                                      say=lambda s: print(s, flush=True), algorithm=args.algorithm,
                                      round_timeout_s=args.round_timeout)
    except ValueError as exc:
        print(f"royalefleet chaos: {exc}", file=sys.stderr)
        return 2
    print("chaos: " + describe(figures))
    for p in problems:
        print("chaos: PROBLEM " + p)
    if not args.keep:
        if problems:
            print(f"chaos: the run's folder is kept for reading: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return 1 if problems else 0
