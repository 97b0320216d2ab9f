"""Pool candidates offered while the ladder is silent are offered again once it answers
(services/learner/pool_client.py ``PoolClient.unoffered``). A fake ladder client: no service."""

from __future__ import annotations

from services.learner.pool_client import PoolClient
from shared import transport
from shared.config import profile
from shared.messages import AdmitCandidate, Admitted, PlanReply, PlanRequest


class Counter:
    def inc(self, n=1):
        pass


class SilentThenAnswering:
    """Times out while ``silent``; else admits every candidate it has not seen and answers plans."""

    def __init__(self):
        self.silent, self.admitted, self.offers = True, [], []
        self.ids = iter(range(1, 1000))

    def next_id(self):
        return next(self.ids)

    def request(self, body, arrays=None, *, timeout_s=None):
        if isinstance(body, AdmitCandidate):
            self.offers.append(body.snapshot_id)
        if self.silent:
            raise transport.ServiceTimeout("ladder at tcp://127.0.0.1:5556 did not answer within 2 s")
        if isinstance(body, AdmitCandidate):
            status = "duplicate" if body.snapshot_id in self.admitted else "pending"
            self.admitted.append(body.snapshot_id)
            return Admitted(request_id=body.request_id, snapshot_id=body.snapshot_id, status=status), {}
        return PlanReply(request_id=body.request_id, assignments=[], role_counts=(1, 0, 0)), {}


def test_candidates_offered_while_the_ladder_is_silent_are_offered_again_once_it_answers(tmp_path):
    ladder, said = SilentThenAnswering(), []
    pool = PoolClient(profile("tiny"), ladder, ckpt=None, ckpt_token="t", run_dir=str(tmp_path),
                      unanswered_counter=Counter(), say=said.append)
    a, b = "a" * 16, "b" * 16
    assert pool.admit_candidate(a, env_steps=100, iteration=3) is False
    assert pool.admit_candidate(b, env_steps=200, iteration=6) is False
    assert pool.unoffered == [(a, 100, 3), (b, 200, 6)] and ladder.admitted == []
    assert f"learner: candidate snap:{a} not offered to the pool yet: ladder at tcp://127.0.0.1:5556 did not " \
           "answer within 2 s; offered again once the ladder answers a plan" in said
    ladder.silent = False
    req = PlanRequest(request_id=ladder.next_id(), iteration=7, n_battles=1, battles=[0], next_ordinals=[0], lookahead=1)
    assert isinstance(pool.request_plan(req, fleet=None), PlanReply)
    assert ladder.admitted == [a, b] and pool.unoffered == []
    assert f"learner: pool candidate snap:{a} pending: it waits for a gate" in said
