"""Size limits on every socket (issue 38): a socket made without ``max_bytes`` still has
MAXMSGSIZE (``DEFAULT_MAX_BYTES``), a reply bigger than a client's limit never reaches it, and
every service passes its configured limit to each socket it makes (the learner's ladder client
had none)."""

from __future__ import annotations

import ast
from pathlib import Path

import zmq

from shared import transport
from shared.messages import Decoder, FromLadder

ROOT = Path(__file__).resolve().parents[2]


def test_a_socket_made_without_a_limit_has_the_default_one():
    ctx = zmq.Context()
    try:
        dealer = transport.connect_dealer("tcp://127.0.0.1:9", ctx=ctx)
        router = transport.bind_router("tcp://127.0.0.1:*", ctx=ctx)
        assert dealer.getsockopt(zmq.MAXMSGSIZE) == router.getsockopt(zmq.MAXMSGSIZE) == 64 << 20
        dealer.close(0)
        router.close(0)
    finally:
        ctx.term()
    client = transport.Client("tcp://127.0.0.1:9", Decoder(FromLadder), name="ladder")
    try:
        assert client._sock.getsockopt(zmq.MAXMSGSIZE) == transport.DEFAULT_MAX_BYTES
    finally:
        client.close()


def test_a_reply_over_the_clients_limit_never_reaches_it():
    ctx = zmq.Context()
    router = transport.bind_router("tcp://127.0.0.1:*", ctx=ctx)
    address = router.getsockopt_string(zmq.LAST_ENDPOINT)
    dealer = transport.connect_dealer(address, ctx=ctx, max_bytes=1 << 20)
    try:
        dealer.send(b"hi")
        assert router.poll(5000)
        identity, _ = router.recv_multipart()
        router.send_multipart([identity, b"x" * (2 << 20)])  # a 2 MiB frame to a 1 MiB client
        assert not dealer.poll(500)
    finally:
        dealer.close(0)
        router.close(0)
        ctx.term()


def test_every_socket_a_service_makes_is_given_its_limit():
    missing = []
    for path in sorted((ROOT / "services").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in ("Client", "connect_dealer", "bind_router") and "max_bytes" not in {k.arg for k in node.keywords}:
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert missing == []
