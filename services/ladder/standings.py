"""The ladder's current rating table: the fit of the result log's evaluation games, kept
current by reading only what was appended since the last look.

The authoritative rating is a pure function of the log's eval games (royalelearn-facts 6.1;
``services.ladder.rating.fit_with`` over ``extract_games(kinds=("eval",))``). Re-reading and
re-fitting the whole log for every plan would grow with the run, so ``Standings`` keeps a byte
offset into ``results.jsonl``, decodes only the complete lines past it, keeps the eval records
and refits only when new ones arrived. The table is the same one a full read gives
(``current_ratings`` in services/ladder/pool.py is exactly that full read).

Training records are read past and dropped (PFSP-selected, biased: never fitted). A line that
does not decode is skipped here; the ladder reports those at start-up (results.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from services.ladder.rating import RatingTable, extract_games, fit_with, kind_of
from services.ladder.results import ResultLine
from shared.messages import EpisodeRecord

READ_CHUNK = 1 << 20
"""Bytes read per system call while catching up with the log."""

_decoder = msgspec.json.Decoder(ResultLine)


class Standings:
    """The eval games of one result log and their fit.

    ``refresh()`` reads what was appended (cheap when nothing was) and returns how many new
    evaluation GAMES it found (a battle's two seat records are one game); ``table()`` refreshes
    and returns the fit, refitting only when the eval games changed, or None while the log holds
    no evaluation game. ``rater`` is a ``shared.config.RaterConfig``.

    A log that shrank or was replaced (another inode) is read again from the start. Raises
    OSError only for a log that exists but cannot be read.
    """

    def __init__(self, path: str | os.PathLike, rater):
        self.path = Path(path)
        self.rater = rater
        self._offset = 0
        self._inode: int | None = None
        self._records: list[EpisodeRecord] = []
        self._games: set[tuple] = set()
        self._table: RatingTable | None = None
        self._dirty = False
        self.fits = 0
        """Fits made so far (a refit only follows new eval games)."""

    @property
    def eval_games(self) -> int:
        """Distinct evaluation games read so far."""
        return len(self._games)

    def refresh(self) -> int:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return 0
        if st.st_ino != self._inode or st.st_size < self._offset:
            self.__init__(self.path, self.rater)  # a new file: start over
            self._inode = st.st_ino
        if st.st_size == self._offset:
            return 0
        before = len(self._games)
        with open(self.path, "rb") as fh:
            fh.seek(self._offset)
            parts = []
            while chunk := fh.read(READ_CHUNK):
                parts.append(chunk)
        data = b"".join(parts)
        end = data.rfind(b"\n")
        if end < 0:
            return 0  # only a partial line so far: wait until it is terminated
        self._offset += end + 1
        for raw in data[: end + 1].splitlines():
            try:
                rec = _decoder.decode(raw).record
            except msgspec.DecodeError:
                continue
            if kind_of(rec) != "eval":
                continue
            self._records.append(rec)
            self._games.add((rec.role, rec.iteration, rec.battle, rec.ordinal))
            self._dirty = True
        return len(self._games) - before

    def table(self) -> RatingTable | None:
        self.refresh()
        if self._dirty:
            games = extract_games(self._records, kinds=("eval",)).games
            self._table = fit_with(games, self.rater) if games else None
            self._dirty = False
            self.fits += 1
        return self._table
