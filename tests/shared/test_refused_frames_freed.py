"""A refused multi-frame message is released as soon as its refusal is handled, not when
Python's cyclic GC next runs (shared/transport.py ``recv_frames``). Before, the ProtocolError and
the frame that raised it referred to each other, so the message's first frame (up to
``max_message_mb``) stayed alive until a collection: 3 x 48 MiB messages kept 48 MB each
(docs/reliability.md, "Hostile input")."""

from __future__ import annotations

import gc
import weakref

import zmq

from shared.messages import ProtocolError
from shared.transport import bind_router, connect_dealer, recv_frames


def test_a_refused_message_and_its_first_frame_are_freed_without_the_cyclic_gc():
    server = bind_router("tcp://127.0.0.1:*", max_bytes=1 << 20)
    client = connect_dealer(server.getsockopt_string(zmq.LAST_ENDPOINT), max_bytes=1 << 20)
    part = b"\1" * ((1 << 20) - 100)  # each frame fits, the three do not
    gc.disable()
    try:
        client.send_multipart([part, part, part])
        assert server.poll(10_000)
        refs = []
        try:
            recv_frames(server, router=True)
        except ProtocolError as exc:
            assert exc.reason == "oversized" and len(exc.head) == len(part) and exc.identity
            refs = [weakref.ref(exc), weakref.ref(exc.head)]
        assert refs and [r() for r in refs] == [None, None]
    finally:
        gc.enable()
        client.close(0)
        server.close(0)
