"""Plaintext stays on loopback (issue 38): without CURVE a server will not bind, and a client
will not connect to, an address beyond loopback unless the process was started with
ROYALEFLEET_INSECURE_PLAINTEXT=1, which its metrics then show."""

from __future__ import annotations

import socket

import pytest
from prometheus_client import CollectorRegistry

from shared import transport
from shared.messages import Decoder, FromCheckpoint
from tests.stack import free_ports


@pytest.fixture(autouse=True)
def no_flag(monkeypatch):
    monkeypatch.delenv(transport.INSECURE_ENV, raising=False)


def test_a_plaintext_bind_to_every_address_is_refused_and_binds_nothing():
    (port,) = free_ports(1)
    for address in (f"tcp://0.0.0.0:{port}", f"tcp://*:{port}", f"tcp://[::]:{port}"):
        with pytest.raises(OSError) as err:
            transport.bind_router(address)
        assert str(err.value).startswith(f"will not bind {address} is not a loopback address and CURVE is off "
                                         "(ROYALEFLEET_CURVE_DIR unset)")
        assert "ROYALEFLEET_INSECURE_PLAINTEXT=1" in str(err.value)
    with socket.socket() as probe:  # nothing holds the port
        probe.bind(("0.0.0.0", port))


def test_a_plaintext_connect_beyond_loopback_is_refused_the_client_too():
    for address in ("tcp://10.0.0.5:5555", "tcp://learner:5555", "tcp://127.0.0.1;10.0.0.1:5555"):
        with pytest.raises(OSError, match=f"will not connect to {address} is not a loopback address"):
            transport.connect_dealer(address)
    with pytest.raises(OSError, match="will not connect to tcp://ladder:5556"):
        transport.Client("tcp://ladder:5556", Decoder(FromCheckpoint), name="ladder")


def test_with_the_flag_plaintext_binds_everywhere_works_and_the_gauge_says_so(monkeypatch):
    registry = CollectorRegistry()
    transport.register_plaintext_gauge(registry)
    assert registry.get_sample_value("royalefleet_insecure_plaintext") == 0.0
    monkeypatch.setenv(transport.INSECURE_ENV, "1")
    assert registry.get_sample_value("royalefleet_insecure_plaintext") == 1.0
    (port,) = free_ports(1)
    server = transport.bind_router(f"tcp://0.0.0.0:{port}")
    client = transport.connect_dealer(f"tcp://127.0.0.1:{port}")
    try:
        client.send(b"hello")
        assert server.poll(5000) and server.recv_multipart()[1] == b"hello"
        transport.connect_dealer("tcp://10.255.255.1:9").close(0)  # allowed now (never reached)
    finally:
        client.close(0)
        server.close(0)


def test_loopback_and_curve_need_no_flag():
    assert transport.plaintext_refusal("tcp://127.0.0.1:5555", None) is None
    assert transport.plaintext_refusal("tcp://[::1]:5555", None) is None
    assert transport.plaintext_refusal("tcp://localhost:5555", None) is None
    assert transport.plaintext_refusal("ipc:///tmp/x", None) is None
    assert transport.plaintext_refusal("tcp://0.0.0.0:5555", object()) is None  # CURVE on
    assert transport.plaintext_refusal("tcp://0.0.0.0:5555", None, {transport.INSECURE_ENV: "yes"}) is None
    assert transport.plaintext_refusal("tcp://0.0.0.0:5555", None, {transport.INSECURE_ENV: "0"}) is not None
