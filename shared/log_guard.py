"""What a service prints about a peer's input: escaped, bounded, and rate-limited per reason.

Anything a peer sent (a refused message's text, a rollout's Failure message, a host name) can
hold escape sequences, newlines or megabytes. ``printable`` makes it one harmless line;
``RefusalLog`` prints the first refusal of each reason at once and then at most one line per
reason every ``interval_s``, saying how many it did not print. The counters
(``*_messages_refused_total{reason}``) count every refusal; the log is the sample that says
what they were.
"""

from __future__ import annotations

import time
from collections.abc import Callable

MAX_PRINTED = 400
"""Characters of peer text printed at most; the rest is summarised as ``... (+N chars)``."""

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def printable(text: object, limit: int = MAX_PRINTED) -> str:
    """``text`` as one line safe for a terminal and a log file: control characters (C0, DEL,
    C1: escape sequences, newlines, carriage returns) and the line/paragraph separators become
    ``\\xNN`` / ``\\uNNNN`` escapes, backslashes are doubled so an escape cannot be forged, and
    anything past ``limit`` characters is cut and counted. Printable non-ASCII text is kept."""
    text = str(text)
    cut = len(text) - limit if len(text) > limit else 0
    if cut:
        text = text[:limit]
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20 or 0x7F <= code <= 0x9F:
            out.append(f"\\x{code:02x}")
        elif code in (0x2028, 0x2029) or 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069:
            out.append(f"\\u{code:04x}")  # line separators and bidi overrides reorder a terminal line
        else:
            out.append(ch)
    return "".join(out) + (f"... (+{cut} chars)" if cut else "")


class RefusalLog:
    """Prints refusals through ``say``: per ``reason``, the first at once, then at most one per
    ``interval_s`` seconds, that line saying how many of the reason went unprinted since the
    last. ``text`` is escaped (``printable``). Not thread-safe: one per serving loop."""

    def __init__(self, say: Callable[[str], None], interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.say, self.interval_s, self.clock = say, interval_s, clock
        self._last: dict[str, float] = {}
        self._unprinted: dict[str, int] = {}
        self.printed = 0
        self.suppressed = 0

    def __call__(self, reason: str, text: str) -> bool:
        """Print (or count) one refusal; True when it was printed."""
        now = self.clock()
        last = self._last.get(reason)
        if last is not None and now - last < self.interval_s:
            self._unprinted[reason] = self._unprinted.get(reason, 0) + 1
            self.suppressed += 1
            return False
        skipped = self._unprinted.pop(reason, 0)
        self._last[reason] = now
        self.printed += 1
        note = (f" [+{skipped} more '{reason}' refusal(s) in the last {now - last:.0f} s not printed; "
                f"the refusal counter has them all]" if skipped else "")
        self.say(printable(text) + note)
        return True
