"""The ladder's status in the learner's metric row (services/learner/ladder_status.py): exact keys,
absent (never 0) when a number does not exist or the ladder does not answer, said once."""

from __future__ import annotations

from prometheus_client import generate_latest

from services.learner.ladder_status import LadderStatusPoller, ladder_row
from services.learner.metrics import LearnerMetrics
from shared.messages import Error, LadderStatus, LadderStatusRequest
from shared.metric_schema import schema_key
from shared.transport import ServiceTimeout

A, B = "snap:00000000000000a0", "snap:00000000000000a1"
FULL = LadderStatus(request_id=1, pool_size=2, pending=1, archive_size=3, champion=B, champion_env_steps=8_000_000,
                    gates_run=4, gates_passed=1, consecutive_gate_failures=3, champion_rating=61.5,
                    champion_rating_se=22.0, transitivity_residual=0.05, pfsp_effective=False, resident=[A, B],
                    ratings={A: 12.0, B: 61.5}, rating_se={A: 30.0, B: 22.0}, gate_score_lower_bound=0.4875)


def test_a_full_status_becomes_these_row_keys():
    assert ladder_row(FULL) == {
        "ladder/pool_size": 2, "ladder/pending_candidates": 1, "ladder/gates_run": 4, "ladder/gates_passed": 1,
        "ladder/consecutive_gate_failures": 3, "ladder/champion_id": B, "ladder/champion_env_steps": 8_000_000,
        "ladder/champion_rating": 61.5, "ladder/champion_rating_se": 22.0, "ladder/transitivity_residual": 0.05,
        "ladder/pfsp_effective": 0, "ladder/gate_score_lower_bound": 0.4875, f"ladder/rating/{A}": 12.0, f"ladder/rating/{B}": 61.5,
        f"ladder/rating_se/{A}": 30.0, f"ladder/rating_se/{B}": 22.0,
    }
    assert all(schema_key(k) is not None for k in ladder_row(FULL))


def test_numbers_that_do_not_exist_are_absent_not_zero():
    assert ladder_row(LadderStatus(request_id=1, pool_size=0)) == {
        "ladder/pool_size": 0, "ladder/pending_candidates": 0, "ladder/gates_run": 0, "ladder/gates_passed": 0,
        "ladder/consecutive_gate_failures": 0,
    }


def test_the_row_exports_member_gauges_with_a_member_label():
    metrics = LearnerMetrics(None)
    metrics.export(ladder_row(FULL))
    text = generate_latest(metrics.registry).decode()
    assert f'royalefleet_learner_ladder_rating{{member="{B}"}} 61.5' in text
    assert f'royalefleet_learner_ladder_rating_se{{member="{A}"}} 30.0' in text
    assert "royalefleet_learner_ladder_pfsp_effective 0.0" in text and "champion_id" not in text
    metrics.export(ladder_row(LadderStatus(request_id=2, pool_size=1, ratings={B: 70.0}, rating_se={B: 20.0})))
    text = generate_latest(metrics.registry).decode()
    assert f'member="{A}"' not in text  # a member the status no longer carries is removed, not left stale


class FakeClient:
    def __init__(self, replies):
        self.replies, self.asked = list(replies), []

    def next_id(self):
        return 7

    def request(self, body, timeout_s=None):
        self.asked.append((body, timeout_s))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply, {}


def test_the_poller_asks_with_its_deadline_and_says_an_outage_once():
    said = []
    client = FakeClient([ServiceTimeout("ladder at tcp://x did not answer within 2 s"),
                         Error(request_id=7, reason="run_name 'r': unknown"), FULL])
    poller = LadderStatusPoller(client, "r", 2.0, said.append)
    assert poller.poll() == {} and poller.poll() == {}
    assert len(said) == 1 and "no ladder status this iteration (ladder at tcp://x did not answer within 2 s)" in said[0]
    assert poller.poll() == ladder_row(FULL)
    assert "answers the status request again" in said[-1] and len(said) == 2
    assert client.asked[0] == (LadderStatusRequest(request_id=7, run_name="r"), 2.0)
