"""The positional words of a command whose positionals are players (``eval``, ``play``,
``export``): an optional ``RUN`` first, then the players, and "did you mean" for a player typo.

The grammar, unambiguous because a player id has a closed form: ``eval [RUN] [A] [B]``,
``play [RUN] [A] [B]``, ``export [RUN] PLAYER OUT``.

- With every word given (``eval myrun latest scripted:defend``), the first is ``RUN``.
- With fewer, the first word is ``RUN`` unless it reads as a player: ``latest``, ``champion``,
  ``snap:<id>``, a bare 16-hex id, ``scripted:<name>`` (any of them with ``+search:N[:D]``).
  ``eval default`` plays the run ``default``'s newest snapshot; ``eval latest scripted:defend``
  plays on the config's run. A run named like a player is named with ``--run-name``.
- A word that is neither a player nor an existing run but close to a player
  (``scripted:defnd``, ``lates``, ``defend``) is refused with exit 2 and the player it is
  likely to mean.
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path

from shared.scripted import SCRIPTED_PLAYERS, SCRIPTED_PREFIX

KEYWORDS = ("latest", "champion")
"""The player ids that name a snapshot of the run by role."""
SEARCH_MARK = "+search:"


class WordRefused(ValueError):
    """A positional word that is neither the run nor a player; the text names it, what it was
    read as and the closest player or run."""


def _is_hex_id(word: str) -> bool:
    return len(word) == 16 and all(c in "0123456789abcdef" for c in word)


def reads_as_player(word: str) -> bool:
    """True when ``word`` has a player id's form (not whether that player exists): a keyword,
    ``snap:...``, ``scripted:...``, a bare 16-hex id, or anything with ``+search:``."""
    from shared.evaluation import split_greedy

    word = split_greedy(word)[0]  # latest+greedy reads as latest
    base = word.partition(SEARCH_MARK)[0]
    return (SEARCH_MARK in word or base in KEYWORDS or base.startswith("snap:")
            or base.startswith(SCRIPTED_PREFIX) or _is_hex_id(base))


def near_player(word: str) -> str | None:
    """The player id ``word`` most likely misspells (search suffix kept), or None: a near-miss
    of ``latest``, ``champion`` or a scripted id, and a bare rung name (``defend``) given
    without its ``scripted:`` prefix."""
    base, mark, tail = word.partition(SEARCH_MARK)
    known = (*KEYWORDS, *SCRIPTED_PLAYERS)
    if base in known:
        return None
    if SCRIPTED_PREFIX + base in SCRIPTED_PLAYERS:
        return SCRIPTED_PREFIX + base + mark + tail
    bare = {p[len(SCRIPTED_PREFIX):]: p for p in SCRIPTED_PLAYERS}
    close = difflib.get_close_matches(base, known, n=1, cutoff=0.75)
    if not close:
        hit = difflib.get_close_matches(base, list(bare), n=1, cutoff=0.75)
        close = [bare[hit[0]]] if hit else []
    return close[0] + mark + tail if close else None


def check_player_word(word: str, command: str) -> None:
    """Raise WordRefused when ``word`` does not have a player's form, or names a scripted player
    that does not exist, with the closest player (``scripted:defnd``: did you mean
    ``scripted:defend``?)."""
    from shared.evaluation import GREEDY_MARK, split_greedy

    plain, greedy = split_greedy(word)
    base = plain.partition(SEARCH_MARK)[0]
    if greedy and base.startswith(SCRIPTED_PREFIX):
        raise WordRefused(f"royalefleet {command}: player {word!r}: {GREEDY_MARK} takes the argmax of a network's "
                          f"policy; only a snapshot has one (snap:<id>{GREEDY_MARK}, latest{GREEDY_MARK}, "
                          f"champion{GREEDY_MARK})")
    if not reads_as_player(word):
        close = near_player(word)
        raise WordRefused(f"royalefleet {command}: player {word!r}: a player is latest, champion, snap:<id>, "
                          f"scripted:<name> or any of them with +search:N"
                          + (f" (did you mean {close!r}?)" if close else ""))
    if base.startswith(SCRIPTED_PREFIX) and base not in SCRIPTED_PLAYERS:
        close = near_player(word)
        raise WordRefused(f"royalefleet {command}: player {word!r}: no such scripted player"
                          + (f" (did you mean {close!r}?)" if close else "")
                          + f"; the scripted players are {', '.join(SCRIPTED_PLAYERS)}")


def split_words(words: list[str], slots: int, required: int, command: str, runs_dir: str | Path | None,
                players: int | None = None) -> tuple[str | None, list[str]]:
    """``(RUN or None, the words after it)`` of ``words`` (the module docstring's grammar), for a
    command that takes ``slots`` positionals after the optional ``RUN``, ``required`` of them
    required, the first ``players`` of them (default all) players. The first word is RUN when
    every slot and RUN are given, or when a slot is left and it does not read as a player.
    ``runs_dir`` (the folder of run folders) decides whether a first word close to a player is
    a run after all. Raises WordRefused (exit 2 in the CLI) for too many or too few words, a
    first word that is neither a run nor a player, and a scripted player that does not exist."""
    if len(words) > slots + 1:
        raise WordRefused(f"royalefleet {command}: {len(words)} words ({' '.join(words)}): expected at most "
                          f"{slots + 1}, an optional RUN then {slots}")
    run = None
    if len(words) == slots + 1 or (len(words) > required and not reads_as_player(words[0])):
        run, words = words[0], words[1:]
        _check_run_word(run, command, runs_dir)
    if len(words) < required:
        raise WordRefused(f"royalefleet {command}: expected {required} word(s) after the optional RUN, got "
                          f"{len(words)}: {' '.join(words) or 'none'}")
    for w in words[: slots if players is None else players]:
        check_player_word(w, command)
    return run, words


def _check_run_word(run: str, command: str, runs_dir: str | Path | None) -> None:
    """A first word taken as RUN that names no run folder but is close to a player: refused,
    naming the player (``eval lates``: did you mean 'latest'?)."""
    if runs_dir is not None and (Path(runs_dir) / run).is_dir():
        return
    close = near_player(run)
    if close:
        raise WordRefused(f"royalefleet {command}: {run!r} is no run (no folder {Path(runs_dir or 'runs') / run}) "
                          f"and no player (did you mean the player {close!r}?)")


class WordsFormatter(argparse.HelpFormatter):
    """argparse's formatter, showing the positional words as their grammar (``[RUN] [A] [B]``)
    instead of argparse's ``[[RUN] [A] [B] ...]``."""

    def _format_args(self, action, default_metavar):
        if action.dest == "words":
            return action.metavar
        return super()._format_args(action, default_metavar)


def add_words_argument(sp, grammar: str, meaning: str) -> None:
    """The positional words of ``sp`` (``grammar`` such as ``[RUN] [A] [B]``, shown in its usage
    line, and ``meaning`` in its help), read by ``take_words``."""
    sp.formatter_class = WordsFormatter
    sp.add_argument("words", nargs="*", metavar=grammar,
                    help=f"{meaning}. RUN (the same as --run-name) comes first; it may be left out, and a first "
                    "word that reads as a player (latest, champion, snap:<id>, a 16-hex id, scripted:<name>, any "
                    "with +search:N) is a player, so a run named like a player is given with --run-name")
    sp.set_defaults(run=None)


def take_words(args, names: tuple[str, ...], required: int, command: str, players: int | None = None) -> None:
    """Set ``args.run`` and ``args.<name>`` for each of ``names`` from ``args.words``
    (``split_words``; a name not given keeps its default). Raises WordRefused."""
    run, words = split_words(list(args.words), len(names), required, command,
                             getattr(args, "runs_dir", None) or "runs", players)
    args.run = run
    for name, word in zip(names, words):
        setattr(args, name, word)
