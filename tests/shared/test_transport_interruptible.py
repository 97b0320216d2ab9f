"""Every wait ends when the process is asked to stop (issue 12, item 14): a request to a peer
that never answers returns within ``transport.STOP_POLL_S`` of its client's stop event, and an
evaluator whose ladder is dead (a ROUTER that reads and never answers, as a SIGSTOPped
ladder) exits on SIGTERM at once, not after ``services.request_timeout_s`` (30 s)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
import zmq

from shared import transport
from shared.messages import Decoder, EvalJobRequest, FromLadder
from tests.stack import REPO, free_ports


@pytest.fixture
def silent_router():
    """A bound ROUTER that takes every request and answers none: a ladder that hangs."""
    port = free_ports(1)[0]
    sock = transport.bind_router(f"tcp://127.0.0.1:{port}")
    yield port, sock
    sock.close(0)


def test_a_request_to_a_silent_peer_ends_when_stop_is_set(silent_router):
    port, router = silent_router
    stop = threading.Event()
    client = transport.Client(f"tcp://127.0.0.1:{port}", Decoder(FromLadder), name="ladder", timeout_s=30.0,
                              stop=stop)
    try:
        threading.Timer(0.5, stop.set).start()
        t0 = time.monotonic()
        with pytest.raises(transport.RequestStopped, match="stopped waiting for the ladder"):
            client.request(EvalJobRequest(request_id=client.next_id(), worker="w"))
        waited = time.monotonic() - t0
        assert 0.45 <= waited < 0.5 + 2 * transport.STOP_POLL_S + 0.2, waited
        assert router.poll(1000, zmq.POLLIN)  # the request did reach the peer: it was a real wait
        # Once stopped, no new request is sent at all.
        with pytest.raises(transport.RequestStopped, match="not asking the ladder"):
            client.request(EvalJobRequest(request_id=client.next_id(), worker="w"))
    finally:
        client.close()


def test_without_a_stop_event_the_timeout_still_holds(silent_router):
    port, _ = silent_router
    client = transport.Client(f"tcp://127.0.0.1:{port}", Decoder(FromLadder), name="ladder", timeout_s=0.3)
    try:
        t0 = time.monotonic()
        with pytest.raises(transport.ServiceTimeout, match="did not answer within 0 s"):
            client.request(EvalJobRequest(request_id=client.next_id(), worker="w"))
        assert 0.3 <= time.monotonic() - t0 < 1.5
    finally:
        client.close()


def test_an_evaluator_waiting_on_a_hung_ladder_exits_on_sigterm_at_once(silent_router, tmp_path):
    port, router = silent_router
    proc = subprocess.Popen([sys.executable, "-m", "services.evaluator", "--ladder", f"tcp://127.0.0.1:{port}",
                             "--checkpoint", f"tcp://127.0.0.1:{free_ports(1)[0]}", "--metrics-port", "0"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert router.poll(60_000, zmq.POLLIN), "the evaluator sent no job request"
        time.sleep(0.3)  # it now waits for an answer that never comes (request_timeout_s: 30 s)
        t0 = time.monotonic()
        proc.terminate()
        assert proc.wait(timeout=10) == 0
        # "At once" against the 30 s the request would wait: the stop poll is 0.1 s, and what is left is
        # the interpreter's exit (3.6 s once on a machine running four other busy processes).
        assert time.monotonic() - t0 < 8.0
        out = proc.stdout.read()
        assert "stopped" in out.splitlines()[-1], out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
