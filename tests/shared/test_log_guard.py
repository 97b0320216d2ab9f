"""shared.log_guard: peer text printed as one harmless line; refusals rate-limited per reason."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shared.log_guard import MAX_PRINTED, RefusalLog, printable


def test_printable_escapes_what_a_terminal_would_act_on():
    assert printable("ok text é ✓") == "ok text é ✓"
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("line1\nline2\r\tx") == "line1\\nline2\\r\\tx"
    assert printable("\x00\x7f\x9b") == "\\x00\\x7f\\x9b"  # NUL, DEL, the C1 CSI
    assert printable("a\u2028b\u202ec") == "a\\u2028b\\u202ec"
    assert printable("\\x1b") == "\\\\x1b"  # a literal backslash cannot forge an escape
    assert printable("x" * 1000) == "x" * MAX_PRINTED + f"... (+{1000 - MAX_PRINTED} chars)"


@given(st.text(max_size=600))
def test_printable_is_one_line_without_control_characters(text):
    out = printable(text)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u2028\u2029" for c in out)
    assert len(out) <= 6 * MAX_PRINTED + 30  # a kept character becomes at most \uNNNN, plus the cut note
    if len(text) <= MAX_PRINTED and all(c.isprintable() and c != "\\" and not 0x202A <= ord(c) <= 0x202E
                                        and not 0x2066 <= ord(c) <= 0x2069 for c in text):
        assert out == text


def test_refusal_log_prints_the_first_of_each_reason_then_one_per_interval():
    now = [0.0]
    said: list[str] = []
    log = RefusalLog(said.append, interval_s=10.0, clock=lambda: now[0])
    assert log("schema", "first") is True
    for _ in range(99):
        assert log("schema", "again") is False
    assert log("frames", "other reason") is True  # its own budget
    now[0] = 10.0
    assert log("schema", "later\n") is True
    assert said == ["first", "other reason",
                    "later\\n [+99 more 'schema' refusal(s) in the last 10 s not printed; the refusal counter has them all]"]
    assert (log.printed, log.suppressed) == (3, 99)
