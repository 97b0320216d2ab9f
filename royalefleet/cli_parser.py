"""The parser every ``royalefleet`` command uses: argparse with no abbreviated options and a
"did you mean" on every typo it refuses (exit 2).

- No abbreviations (``allow_abbrev=False``): ``--run`` is not quietly ``--run-name`` on one
  command and "ambiguous" on another; an option is spelt whole or refused.
- ``invalid choice`` (a command, ``--profile``, ``--algorithm``, ...) names the closest choice.
- An unknown option (``royalefleet.cli.main`` reads them with ``parse_known_args``) names the
  closest option of its command, and ``--run`` the run's two spellings (``RUN`` and
  ``--run-name``).
"""

from __future__ import annotations

import argparse
import difflib
import re

SPELLINGS = {"--run": "RUN (a positional) or --run-name", "--run_name": "--run-name",
             "--output-dir": "--out", "--outdir": "--out"}
"""Options users reach for that have another spelling here, and that spelling."""

_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` without option abbreviations, whose refusals of a choice say
    "did you mean" (module docstring). Subparsers are of this class too."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        m = _CHOICE.search(message)
        if m:
            choices = [c.strip().strip("'") for c in m.group(2).split(",")]
            close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
            if close:
                message += f" (did you mean {close[0]!r}?)"
        super().error(message)


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of ``parser`` and of its subcommands' parsers."""
    found: list[str] = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        found.extend(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found.extend(option_strings(sub))
    return found


def unknown_words(extra: list[str], parser: argparse.ArgumentParser) -> str:
    """The refusal of words ``parser`` (a command's) did not take: each unknown option with the
    closest option of the command (or its spelling here, ``SPELLINGS``)."""
    known = sorted(set(option_strings(parser)))
    said = []
    for word in extra:
        name = word.split("=", 1)[0]
        if not name.startswith("-"):
            continue
        close = SPELLINGS.get(name) or next(iter(difflib.get_close_matches(name, known, n=1, cutoff=0.6)), None)
        said.append(f"{name}" + (f" (did you mean {close}?)" if close else ""))
    if not said:
        return f"unrecognized arguments: {' '.join(extra)} (this command takes fewer positional words)"
    return "unrecognized arguments: " + ", ".join(said)
