"""The ladder's writes need their role's token (shared/writer_token.py): refused without it,
before anything is filed; served with it; reads stay open."""

from __future__ import annotations

import os

import pytest
import zmq.auth

from services.ladder.results import ResultLog
from services.ladder.service import LadderService
from shared.config import profile
from shared.messages import (Ack, AdmitCandidate, EvalJobRequest, EvalReport, Error, LadderStatus, LadderStatusRequest,
                             MeasureStrength, NoJob, PlanReply, PlanRequest, ReportEpisodes)
from shared.writer_token import (LADDER_TOKEN_ENVS, LADDER_WRITES, Stamped, derive, ladder_purpose, ladder_token,
                                 ladder_tokens, token_file)
from tests.services.ladder.test_service import record

TOKENS = {"learner": "L" * 32, "evaluator": "E" * 32}


@pytest.fixture
def ladder(tmp_path):
    service = LadderService(profile("cpu"), bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=lambda _: None,
                            tokens=TOKENS)
    yield service
    service.close()


def writes(run_name: str, token: str) -> list:
    return [ReportEpisodes(request_id=1, run_name=run_name, episodes=[record(0, 0)], report_id="r1", token=token),
            AdmitCandidate(request_id=2, run_name=run_name, snapshot_id="0123456789abcdef", env_steps=10, iteration=1,
                           token=token),
            MeasureStrength(request_id=3, run_name=run_name, snapshot_id="0123456789abcdef", env_steps=10,
                            iteration=1, token=token),
            EvalJobRequest(request_id=4, worker="w", token=token),
            EvalReport(request_id=5, job_id=1, run_name=run_name, worker="w", records=[], token=token)]


def test_every_write_kind_is_listed_with_a_role():
    assert {cls.__name__ for cls in LADDER_WRITES} == {
        "ReportEpisodes", "AdmitCandidate", "MeasureStrength", "EvalJobRequest", "EvalReport"}
    assert set(LADDER_WRITES.values()) == set(LADDER_TOKEN_ENVS)


@pytest.mark.parametrize("token", ["", "R" * 32, TOKENS["learner"][:-1], "x"])
def test_a_write_without_its_roles_token_is_refused_and_nothing_is_filed(ladder, tmp_path, token):
    run = ladder.config.run_name
    for body in writes(run, token):
        reply = ladder.handle(body)
        assert isinstance(reply, Error), body
        role = LADDER_WRITES[type(body)]
        assert f"missing or wrong {role} token" in reply.reason and type(body).__name__ in reply.reason
    assert ladder.metrics.refused.labels("unauthorized")._value.get() == 5
    assert not ResultLog.for_run(tmp_path, run).path.exists()  # no record written, no folder made
    assert ladder.pool.status(LadderStatusRequest(request_id=9, run_name=run)).pending == 0


def test_the_other_roles_token_does_not_open_a_write(ladder):
    run = ladder.config.run_name
    # the evaluator's token on the learner's report, the learner's on the evaluator's job request
    assert isinstance(ladder.handle(writes(run, TOKENS["evaluator"])[0]), Error)
    assert isinstance(ladder.handle(writes(run, TOKENS["learner"])[3]), Error)


def test_writes_with_their_token_and_reads_without_one_are_served(ladder, tmp_path):
    run = ladder.config.run_name
    report = ladder.handle(writes(run, TOKENS["learner"])[0])
    assert isinstance(report, Ack) and report.count == 1
    assert len(ResultLog.for_run(tmp_path, run).read().lines) == 1
    assert isinstance(ladder.handle(writes(run, TOKENS["evaluator"])[3]), NoJob)
    plan = PlanRequest(request_id=7, iteration=0, n_battles=1, battles=[0], next_ordinals=[0], lookahead=1)
    assert isinstance(ladder.handle(plan), PlanReply)
    assert isinstance(ladder.handle(LadderStatusRequest(request_id=8, run_name=run)), LadderStatus)


def test_a_ladder_without_tokens_accepts_writes(tmp_path):
    service = LadderService(profile("cpu"), bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=lambda _: None,
                            tokens={"learner": "", "evaluator": ""})
    try:
        assert isinstance(service.handle(writes(service.config.run_name, "")[0]), Ack)
    finally:
        service.close()


def test_stamped_client_puts_the_token_on_writes_only():
    sent = []

    class Fake:
        def request(self, body, arrays=None, **kwargs):
            sent.append(body)
            return "reply", None

        def next_id(self):
            return 41

    client = Stamped(Fake(), "T" * 20)
    assert client.next_id() == 41
    for body in writes("run", ""):
        client.request(body)
    client.request(LadderStatusRequest(request_id=1, run_name="run"))
    assert [b.token for b in sent[:5]] == ["T" * 20] * 5
    assert not hasattr(sent[5], "token")


def _keys(folder, with_server_secret: bool, token_role: str | None = None):
    os.makedirs(folder, exist_ok=True)
    pub, sec = zmq.auth.create_certificates(str(folder), "server")
    if not with_server_secret:
        os.remove(sec)
    return pub, sec


def test_tokens_derive_from_the_server_secret_and_a_clients_file(tmp_path):
    servers = tmp_path / "servers"
    _keys(servers, True)
    env = {"ROYALEFLEET_CURVE_DIR": str(servers)}
    expected = ladder_tokens(env)
    _, secret = zmq.auth.load_certificate(str(servers / "server.key_secret"))
    assert expected["evaluator"] == derive(secret, ladder_purpose("evaluator"))
    assert len(expected["learner"]) == 64 and expected["learner"] != expected["evaluator"]
    # an evaluator's keys: no server secret, its token file
    evaluator = tmp_path / "evaluator"
    evaluator.mkdir()
    (evaluator / token_file("evaluator")).write_text(expected["evaluator"] + "\n")
    assert ladder_token("evaluator", {"ROYALEFLEET_CURVE_DIR": str(evaluator)}) == expected["evaluator"]
    # a rollout's keys: neither, so no token at all (a refusal naming the file, not an empty token)
    rollout = tmp_path / "rollout"
    rollout.mkdir()
    with pytest.raises(OSError, match=r"ladder-learner\.token.*royalefleet keys"):
        ladder_token("learner", {"ROYALEFLEET_CURVE_DIR": str(rollout)})
    # the variable wins; CURVE off and no variable: not authenticated
    assert ladder_token("learner", {**env, "ROYALEFLEET_LADDER_LEARNER_TOKEN": "abc"}) == "abc"
    assert ladder_tokens({}) == {"learner": "", "evaluator": ""}
    with pytest.raises(ValueError, match="rollout"):
        ladder_token("rollout", env)


def test_with_curve_a_rollouts_key_gets_nothing_from_the_ladder_and_the_evaluators_needs_its_token(
        tmp_path, monkeypatch):
    """The ladder as Compose runs it (its own keys folder, roles/ladder): the evaluator's key and
    token get a job answer; the evaluator's key without the token an ``unauthorized`` refusal; a
    rollout's key (local, or an extra host's) no connection at all."""
    import threading

    import zmq

    from royalefleet import cmd_keys
    from shared import transport
    from shared.messages import Decoder, FromLadder

    keys = tmp_path / "keys"
    cmd_keys.ensure_keys(str(keys), ["box2"])
    monkeypatch.setenv(transport.CURVE_DIR_ENV, str(keys / "roles" / "ladder"))
    ctx = zmq.Context()
    service = LadderService(profile("cpu"), bind="tcp://127.0.0.1:*", runs_dir=tmp_path / "runs", say=lambda _: None,
                            ctx=ctx)
    assert service.tokens["evaluator"] and service.tokens["learner"]  # derived from the servers' secret
    stop = threading.Event()
    thread = threading.Thread(target=service.serve, args=(stop,), kwargs={"poll_ms": 50})
    thread.start()
    clients = []

    def ask(role_dir, body, timeout_s):
        env = {transport.CURVE_DIR_ENV: str(role_dir)}
        client = transport.Client(service.address, Decoder(FromLadder), name="ladder", timeout_s=timeout_s,
                                  curve=transport.curve_client_keys(env))
        clients.append(client)
        return client.request(body)[0]

    try:
        evaluator = keys / "roles" / "evaluator"
        token = ladder_token("evaluator", {transport.CURVE_DIR_ENV: str(evaluator)})
        assert token == service.tokens["evaluator"]
        assert isinstance(ask(evaluator, EvalJobRequest(request_id=1, worker="e", token=token), 20), NoJob)
        refused = ask(evaluator, EvalJobRequest(request_id=2, worker="e"), 10)
        assert isinstance(refused, Error) and "missing or wrong evaluator token" in refused.reason
        for rollout in (keys / "roles" / "rollout", keys / "hosts" / "box2"):
            with pytest.raises(transport.ServiceTimeout):
                ask(rollout, EvalJobRequest(request_id=3, worker="r", token=token), 1.5)
        # and a rollout's folder holds no ladder token to send
        with pytest.raises(OSError, match="ladder-evaluator.token"):
            ladder_token("evaluator", {transport.CURVE_DIR_ENV: str(keys / "roles" / "rollout")})
    finally:
        stop.set()
        thread.join(10)
        for client in clients:
            client.close()
        service.close()
        transport.stop_curve(ctx)
        ctx.term()
