"""The learner's exit codes (services/learner/main.py): a refusal that came of a service that did
not answer at start (the checkpoint service died mid-request) is 4, which the launcher retries;
a refused config or checkpoint stays 2, which it does not. No learner is built: ``make_learner``
is replaced by one whose run fails as ``resume.resume_run`` fails."""

from __future__ import annotations

import json

import pytest

from services.learner import main as learner_main
from shared import transport


class FailingLearner:
    def __init__(self, fail):
        self.fail = fail

    def request_stop(self, *_):
        pass

    def run(self) -> int:
        self.fail()
        return 0

    def close(self) -> None:
        pass


def unreachable():
    # resume.resume_run's shape: the timeout handled, a refusal raised naming it
    try:
        raise transport.ServiceTimeout("no reply from tcp://checkpoint:5557 within 30.0 s")
    except transport.ServiceTimeout as exc:
        raise SystemExit(f"learner: cannot reach the checkpoint service to look for a checkpoint: {exc}")


def seed_unreachable():
    # pool_client.admit_seed_snapshots' shape: SeedRefused from None, then SystemExit over it
    class SeedRefused(Exception):
        pass

    try:
        try:
            raise transport.ServiceTimeout("no reply")
        except transport.ServiceTimeout as exc:
            raise SeedRefused(f"seed snapshot s: not stored: {exc}") from None
    except SeedRefused as exc:
        raise SystemExit(f"learner: refusing to start: {exc}")


def refused():
    raise SystemExit("learner: refusing to resume ckpt: the run identity differs in 1 field(s)")


@pytest.mark.parametrize("fail,code", [(unreachable, 4), (seed_unreachable, 4), (refused, 2)])
def test_a_service_that_did_not_answer_exits_4_and_a_refusal_exits_2(tmp_path, monkeypatch, capsys, fail, code):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"profile": "tiny", "runs_dir": str(tmp_path / "runs")}))
    monkeypatch.setattr(learner_main, "make_learner", lambda *a: FailingLearner(fail))
    assert learner_main.main(["--config", str(config)]) == code
    out = capsys.readouterr().out
    assert out.endswith("learner: exit 4: a service did not answer; a restart retries\n") is (code == 4)
    assert learner_main.EXIT_UNREACHABLE == 4
