"""A stand-in for a RoyaleViser viewer, for tests: a loopback UDP socket that says the viewer's
hello (``royalegym.viser.HELLO``) to the addresses it watches every 0.1 s and keeps every
datagram that comes back, decoded with msgpack."""

from __future__ import annotations

import socket
import threading
import time

import msgspec


def free_udp_port() -> int:
    """A UDP port on loopback that nothing holds now (and, for a pair, whose next is free too)."""
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if port < 65535:
            probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                probe.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
            finally:
                probe.close()


class Viewer(threading.Thread):
    """Says hello to each of ``ports`` (on 127.0.0.1) until it holds ``wanted`` datagrams (then it
    goes quiet, as a closed viewer does), and keeps each datagram in ``got`` decoded. ``stop``
    ends it; use as a context manager."""

    def __init__(self, *ports: int, wanted: int = 1 << 30):
        super().__init__(daemon=True)
        from royalegym.viser import HELLO

        self.hello, self.targets, self.wanted = HELLO, [("127.0.0.1", p) for p in ports], wanted
        self.got: list = []
        self.stop = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)

    def run(self):
        while not self.stop.is_set():
            if len(self.got) < self.wanted:
                for target in self.targets:
                    try:
                        self.sock.sendto(self.hello, target)
                    except OSError:  # nobody there yet: the port refused an earlier hello
                        pass
            try:
                while True:
                    data, _ = self.sock.recvfrom(1 << 17)
                    self.got.append(msgspec.msgpack.decode(data))
            except (TimeoutError, OSError):
                pass

    def wait_for(self, n: int, timeout: float) -> list:
        """The datagrams once ``n`` have arrived, or those there are after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        return list(self.got)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join(2)
        self.sock.close()
