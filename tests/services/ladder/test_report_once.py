"""A report the ladder wrote but never acked before a crash is written once when the learner
sends it again (``ReportEpisodes.report_id``; services/ladder/results.py ``ReportIds``;
services/learner/episode_courier.py keeps the id across sends and restarts)."""

from __future__ import annotations

import msgspec

from services.ladder.results import ResultLog
from services.learner.episode_courier import EpisodeCourier
from shared import transport
from shared.messages import Ack, ReportEpisodes
from tests.services.ladder.test_service import Running, record


def report(running, episodes, report_id):
    return running.request(ReportEpisodes(request_id=running.client.next_id(), run_name="default",
                                          episodes=episodes, report_id=report_id))


def test_a_report_resent_to_a_restarted_ladder_is_written_once(tmp_path):
    episodes = [record(0, 0), record(0, 0, "red"), record(3, 1)]
    first = Running(tmp_path)
    try:
        assert report(first, episodes, "a1b2").count == 3
    finally:
        first.close()  # the crash: written and fsynced, its Ack never reached the learner
    again = Running(tmp_path)
    try:
        reply = report(again, episodes, "a1b2")
        assert isinstance(reply, Ack) and reply.count == 0
        assert any("report a1b2 sent again (its Ack was lost): 3 of its 3 record(s)" in s for s in again.said)
        assert report(again, [record(4, 0)], "c3d4").count == 1  # another report is written
        assert report(again, [record(4, 0)], "").count == 1  # no id: every send is written (older learners)
    finally:
        again.close()
    log = ResultLog.for_run(tmp_path, "default").read()
    assert log.records == episodes + [record(4, 0), record(4, 0)]
    assert [line.report_id for line in log.lines] == ["a1b2"] * 3 + ["c3d4", ""]


def test_a_report_torn_by_the_crash_gets_only_its_missing_records(tmp_path):
    episodes = [record(0, 0), record(1, 0), record(2, 0)]
    log = ResultLog.for_run(tmp_path, "default")
    log.append(episodes[:1], "e5f6")
    with open(log.path, "ab") as fh:  # the second line torn mid-write
        fh.write(b'{"run_name":"default","wall":"2026-12-03T09:00:00.000+00:00","rec')
    running = Running(tmp_path)
    try:
        assert report(running, episodes, "e5f6").count == 2
    finally:
        running.close()
    assert log.read().records == episodes


class LosingLadder:
    """A ladder client whose first report times out (the ladder wrote it and crashed) and which
    later answers a newer request without acking it (so the courier sends it again)."""

    def __init__(self):
        self.sent: list[ReportEpisodes] = []
        self.ids = iter(range(100, 200))

    def next_id(self):
        return next(self.ids)

    def request(self, body, arrays=None, *, timeout_s=None):
        self.sent.append(body)
        if len(self.sent) == 1:
            raise transport.ServiceTimeout("ladder at tcp://ladder:5556 did not answer within 2 s")
        return Ack(request_id=body.request_id, count=len(body.episodes)), {}

    def late_reply(self, rid):
        return None

    def answered_after(self, rid):
        return True


def test_the_learner_resends_a_held_report_with_its_report_id_across_a_restart(tmp_path):
    ladder = LosingLadder()
    courier = EpisodeCourier(ladder, "default", str(tmp_path), say=lambda s: None)
    courier.deliver([record(0, 0)], iteration=1)
    held = (tmp_path / "episodes.held.jsonl").read_bytes()
    report_id = msgspec.json.decode(held.splitlines()[0])["report_id"]
    assert len(report_id) == 16 and ladder.sent[0].report_id == report_id
    restarted = EpisodeCourier(ladder, "default", str(tmp_path), say=lambda s: None)  # a learner restart
    restarted.load()
    restarted.deliver([record(1, 0)], iteration=2)
    assert [b.report_id for b in ladder.sent[1:]] == [report_id, ladder.sent[2].report_id]
    assert ladder.sent[2].report_id not in ("", report_id) and restarted.held() == 0
