"""``royalefleet up`` gives each token only to the processes of its role (and the server that
checks it), and with CURVE on each service its own role's keys (issue 38)."""

from __future__ import annotations

from royalefleet.cmd_keys import ensure_keys
from royalefleet.launcher import Stack
from shared.config import load_config
from shared.transport import CURVE_DIR_ENV
from shared.writer_token import LADDER_TOKEN_ENVS, TOKEN_ENV

LEARNER, EVALUATOR = LADDER_TOKEN_ENVS["learner"], LADDER_TOKEN_ENVS["evaluator"]


def envs(tmp_path, monkeypatch, curve: str | None = None) -> dict[str, dict]:
    for var in (TOKEN_ENV, LEARNER, EVALUATOR, CURVE_DIR_ENV):
        monkeypatch.delenv(var, raising=False)
    if curve is not None:
        monkeypatch.setenv(CURVE_DIR_ENV, curve)
    cfg = load_config({"profile": "tiny", "run_name": "t", "runs_dir": str(tmp_path / "runs"),
                       "local": {"evaluators": 2, "rollouts": 2}})
    return {name: child.env for name, child in Stack(cfg, say=lambda _: None).children.items()}


def test_each_token_goes_to_its_role_and_the_server_that_checks_it(tmp_path, monkeypatch):
    got = envs(tmp_path, monkeypatch)
    holders = {var: sorted(n for n, env in got.items() if var in env) for var in (TOKEN_ENV, LEARNER, EVALUATOR)}
    assert holders == {TOKEN_ENV: ["checkpoint", "learner"], LEARNER: ["ladder", "learner"],
                       EVALUATOR: ["evaluator-0", "evaluator-1", "ladder"]}
    tokens = {got["ladder"][LEARNER], got["ladder"][EVALUATOR], got["learner"][TOKEN_ENV]}
    assert len(tokens) == 3 and all(len(t) == 32 for t in tokens)  # fresh, distinct, 16 random bytes each
    assert got["evaluator-1"][EVALUATOR] == got["ladder"][EVALUATOR] == got["evaluator-0"][EVALUATOR]
    assert not any(k in got["rollout-0"] for k in (TOKEN_ENV, LEARNER, EVALUATOR))
    again = envs(tmp_path, monkeypatch)
    assert again["ladder"][LEARNER] != got["ladder"][LEARNER]  # a new start, new tokens


def test_with_curve_each_service_reads_its_own_roles_keys(tmp_path, monkeypatch):
    keys = tmp_path / "keys"
    ensure_keys(str(keys))
    got = envs(tmp_path, monkeypatch, str(keys))
    assert {n: env[CURVE_DIR_ENV] for n, env in got.items()} == {
        n: str(keys / "roles" / n.split("-")[0]) for n in got}
    # a folder that is already one role's (a rollout host's bundle) is used as it is
    got = envs(tmp_path, monkeypatch, str(keys / "roles" / "rollout"))
    assert got["rollout-1"][CURVE_DIR_ENV] == str(keys / "roles" / "rollout")
