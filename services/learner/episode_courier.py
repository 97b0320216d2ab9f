"""Finished episodes to the ladder's result log, exactly once, whether or not the ladder answers.

A report that times out is held with its request id: its Ack may still come (a stopped ladder
serves it when it runs again, ``transport.Client.late_reply``). It is sent again only once the
ladder has answered a later request without acking it (one connection delivers in order, so it
was lost on the way, e.g. the ladder restarted): a batch is written once. A refusal (Error) is
said and not retried: the same records would be refused again. Held batches are kept in
``<run>/episodes.held.jsonl`` (replaced atomically, removed when none is held), so a learner
stopped or killed while the ladder is away delivers them after its restart. Each batch carries
its own report id (``ReportEpisodes.report_id``, kept in the held file), the same on every send,
so a batch the ladder wrote but never acked before it crashed is not written twice when it is
sent again (services/ladder/results.py ``ReportIds``).
"""

from __future__ import annotations

import os

import msgspec

from shared import transport
from shared.durable import replace_file
from shared.messages import Ack, EpisodeRecord, ReportEpisodes
from shared.run_dir import HELD_EPISODES

HELD_EPISODES = HELD_EPISODES
"""``<run>/episodes.held.jsonl``: episode reports the ladder has not acknowledged, one batch a line."""


class HeldBatch(msgspec.Struct, forbid_unknown_fields=True):
    iteration: int
    episodes: list[EpisodeRecord]
    report_id: str = ""
    """"" in a file written before report ids: the batch gets a new one."""


def new_report_id() -> str:
    """A batch's report id: 16 random hex characters."""
    return os.urandom(8).hex()


class EpisodeCourier:
    """Delivers the learner's episode reports over ``ladder``; see the module docstring."""

    def __init__(self, ladder: transport.Client, run_name: str, run_dir: str, say):
        self.ladder, self.run_name, self.say = ladder, run_name, say
        self.path = os.path.join(run_dir, HELD_EPISODES)
        self.batches: list[list] = []
        """[request id or None, iteration, episodes, report id]: reports the ladder has not
        acknowledged, oldest first."""

    def held(self) -> int:
        """Episodes not yet acknowledged (the row's ``health/episodes_held``)."""
        return sum(len(b[2]) for b in self.batches)

    def deliver(self, episodes: list, iteration: int, timeout_s: float | None = None) -> None:
        """Hand ``episodes`` of ``iteration`` (the learner's current one) and every batch still
        held to the ladder, oldest first; ``timeout_s`` for the first request (None: the client's;
        the learner passes its short status timeout while the ladder is silent)."""
        if episodes:
            self.batches.append([None, iteration, episodes, new_report_id()])
        self._send(iteration, timeout_s)
        self._persist()

    def load(self) -> None:
        """Take the batches a previous process held to send first."""
        try:
            with open(self.path, "rb") as fh:
                lines = fh.read().splitlines()
        except FileNotFoundError:
            return
        for n, line in enumerate(lines, 1):
            try:
                batch = msgspec.json.decode(line, type=HeldBatch)
            except msgspec.DecodeError as exc:
                self.say(f"learner: line {n} of {self.path} set aside, it does not decode: {exc}")
                continue
            self.batches.append([None, batch.iteration, batch.episodes, batch.report_id or new_report_id()])
        self.say(f"learner: {self.held()} episode(s) held by an earlier process ({self.path}) go to the ladder "
                 "with the next report")

    def _send(self, current: int, timeout_s: float | None) -> None:
        while self.batches:
            batch = self.batches[0]
            rid, it, eps, report_id = batch
            if rid is not None:
                late = self.ladder.late_reply(rid)
                if late is None and not self.ladder.answered_after(rid):
                    return  # perhaps still queued at a stopped ladder: wait for its answer
                if late is not None:
                    self._answered(late, it, eps, current)
                    self.batches.pop(0)
                    continue
            batch[0] = rid = self.ladder.next_id()
            try:
                reply, _ = self.ladder.request(ReportEpisodes(request_id=rid, run_name=self.run_name, episodes=eps,
                                                              report_id=report_id), timeout_s=timeout_s)
            except transport.ServiceTimeout as exc:
                self.say(f"learner: episode report of iteration {it} not acknowledged ({exc}); {self.held()} "
                         "episode(s) held until the ladder answers")
                return
            self._answered(reply, it, eps, current)
            self.batches.pop(0)
            timeout_s = None

    def _persist(self) -> None:
        try:
            if self.batches:
                replace_file(self.path, b"".join(
                    msgspec.json.encode({"iteration": it, "episodes": eps, "report_id": report_id}) + b"\n"
                    for _, it, eps, report_id in self.batches))
            elif os.path.exists(self.path):
                os.remove(self.path)
        except OSError as exc:
            self.say(f"learner: {self.path} not written ({exc}); the held episodes are in memory only")

    def _answered(self, reply, iteration: int, episodes: list, current: int) -> None:
        if isinstance(reply, Ack):
            if iteration != current:
                self.say(f"learner: the ladder took the {len(episodes)} held episode(s) of iteration {iteration}")
        else:
            self.say(f"learner: the ladder refused the episode report of iteration {iteration}: "
                     f"{getattr(reply, 'reason', reply)}")
