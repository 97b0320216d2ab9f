"""The learner's halt endpoint: only a request with the right bearer token asks for a halt."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from services.learner.halt import HaltEndpoint, reason_from


@pytest.fixture
def endpoint():
    asked = []
    reg = CollectorRegistry()
    counter = Counter("halt_requests", "x", ["outcome"], registry=reg)
    ep = HaltEndpoint("127.0.0.1", 0, "s3cret", asked.append, counter)
    yield ep, asked, reg
    ep.close()


def post(port, body=b"{}", token="s3cret", path="/halt"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_right_token_halts_with_the_alerts_as_reason(endpoint):
    ep, asked, reg = endpoint
    grafana = {"title": "[FIRING:1]", "alerts": [{"labels": {"alertname": "manual_stop"},
                                                    "annotations": {"summary": "loss exploded"}}]}
    code, text = post(ep.port, json.dumps(grafana).encode())
    assert code == 202 and asked == ["operator halt: manual_stop: loss exploded"]
    assert reg.get_sample_value("halt_requests_total", {"outcome": "accepted"}) == 1


@pytest.mark.parametrize("token", [None, "wrong", "s3cret "])
def test_a_missing_or_wrong_token_is_refused_and_counted(endpoint, token):
    ep, asked, reg = endpoint
    code, _ = post(ep.port, token=token)
    assert code == 401 and asked == []
    assert reg.get_sample_value("halt_requests_total", {"outcome": "unauthorized"}) == 1


def test_other_paths_and_oversized_bodies_are_refused(endpoint):
    ep, asked, _ = endpoint
    assert post(ep.port, path="/metrics")[0] == 404
    assert post(ep.port, body=b"x" * (1 << 17))[0] == 413
    assert asked == []


def test_reason_from_plain_and_broken_bodies():
    assert reason_from(b'{"reason": "maintenance"}') == "maintenance"
    assert reason_from(b"not json") == "operator halt (unparseable body)"
    assert reason_from(b"[1, 2]") == "operator halt"
