"""``royalefleet up``/``resume`` continue a run with its own config.json (royalefleet/start_config.py)
and the learner does the same under Compose (shared/recorded_config.py). No stack starts here:
the run folder is built as ``up`` builds it (``Stack._write_config``: the config's canonical
JSON) and the stack is replaced by one that records the config it was given."""

from __future__ import annotations

import json

import msgspec
import pytest

import shared.config_load
from royalefleet import cli, launcher
from shared.config import PROFILES, dump_config, load_config
from shared.recorded_config import for_learner, identity_changes


class FakeStack:
    started: list = []

    def __init__(self, cfg, **kw):
        FakeStack.started.append(cfg)

    def run(self) -> int:
        return 0


class HasCheckpoint:
    """``CheckpointStore`` of a run that holds one checkpoint (``resume`` asks)."""

    def __init__(self, root):
        self.root = str(root)

    def index(self):
        return type("Index", (), {"entries": [object()]})()


@pytest.fixture
def stack(monkeypatch, tmp_path):
    FakeStack.started = []
    monkeypatch.setattr(launcher, "Stack", FakeStack)
    import services.checkpoint.store

    monkeypatch.setattr(services.checkpoint.store, "CheckpointStore", HasCheckpoint)
    return FakeStack


def record(runs, name: str, doc: dict):
    """The run folder ``royalefleet up`` leaves: ``<runs>/<name>/config.json``."""
    cfg = load_config({**doc, "run_name": name, "runs_dir": str(runs)})
    (runs / name / "checkpoints").mkdir(parents=True, exist_ok=True)
    (runs / name / "config.json").write_bytes(dump_config(cfg))
    return cfg


@pytest.mark.parametrize("machine_default", ["cpu", "laptop"])
@pytest.mark.parametrize("name", sorted(PROFILES))
def test_resume_RUN_with_no_other_option_resumes_every_profile_run(tmp_path, stack, monkeypatch, capsys,
                                                                   name, machine_default):
    # The machine's default profile (laptop when torch sees a GPU) must not matter to a run
    # that says which profile it is.
    monkeypatch.setattr(shared.config_load, "default_profile_name", lambda: machine_default)
    runs = tmp_path / "runs"
    made = record(runs, name, {"profile": name})
    assert cli.main(["resume", name, "--runs-dir", str(runs), "--no-doctor"]) == 0
    assert dump_config(stack.started[0]) == dump_config(made)
    out = capsys.readouterr().out
    assert f"royalefleet resume: run {name!r} continues with its own config ({runs / name / 'config.json'})\n" in out


def test_an_old_run_keeps_wire_codec_1_and_its_old_gate(tmp_path, stack):
    runs = tmp_path / "runs"
    old = record(runs, "old", {"profile": "cpu", "services": {"wire_codec": 1},
                               "ladder": {"gate": {"champion_games": 1000}}})
    assert cli.main(["up", "old", "--runs-dir", str(runs), "--no-doctor"]) == 0
    cfg = stack.started[0]
    assert cfg.services.wire_codec == 1 and cfg.ladder.gate.champion_games == 1000 and cfg == old


def test_a_record_written_before_wire_codec_existed_keeps_codec_1(tmp_path, stack):
    runs = tmp_path / "runs"
    made = record(runs, "older", {"profile": "cpu", "services": {"wire_codec": 1}})
    doc = json.loads((runs / "older" / "config.json").read_text())
    del doc["services"]["wire_codec"]  # as the launcher wrote it before the field existed
    (runs / "older" / "config.json").write_text(json.dumps(doc))
    assert cli.main(["resume", "older", "--runs-dir", str(runs), "--no-doctor"]) == 0
    assert stack.started == [made] and made.services.wire_codec == 1


def test_an_option_that_changes_the_identity_is_refused_naming_field_option_and_ways_on(tmp_path, stack, capsys):
    runs = tmp_path / "runs"
    record(runs, "r1", {"profile": "cpu"})
    assert cli.main(["resume", "r1", "--runs-dir", str(runs), "--no-doctor", "--battles-per-rollout", "8",
                     "--timesteps", "5000"]) == 2
    assert stack.started == []
    assert capsys.readouterr().err == (
        f"royalefleet resume: refusing to start run 'r1' with options that change its run identity (its own config "
        f"is {runs / 'r1' / 'config.json'}; identity fields rollout_digest):\n"
        "  rollout.battles: 16 -> 8 (--battles-per-rollout)\n"
        "These change the numbers the run produces. Leave them out to continue the run as recorded "
        "(`royalefleet resume r1`), start a new run with another RUN, or pass --allow-identity-drift to record "
        "the drift and continue.\n")


def test_an_option_outside_the_identity_is_accepted_and_shown(tmp_path, stack, capsys):
    runs = tmp_path / "runs"
    made = record(runs, "r1", {"profile": "laptop"})
    assert cli.main(["up", "--run-name", "r1", "--runs-dir", str(runs), "--no-doctor", "--timesteps", "5000",
                     "--iterations", "9"]) == 0
    cfg = stack.started[0]
    assert cfg.timestep_limit == 5000 and msgspec.structs.replace(cfg, timestep_limit=0) == made
    assert capsys.readouterr().out.startswith(
        f"royalefleet up: run 'r1' continues with its own config ({runs / 'r1' / 'config.json'}), changed by this "
        "start:\n  timestep_limit: 0 -> 5000 (--timesteps)\n")


def test_another_profile_is_refused_on_a_run_and_the_same_profile_is_the_record(tmp_path, stack, capsys):
    runs = tmp_path / "runs"
    made = record(runs, "r1", {"profile": "cpu", "master_seed": 5})
    assert cli.main(["up", "r1", "--runs-dir", str(runs), "--no-doctor", "--profile", "laptop"]) == 2
    err = capsys.readouterr().err
    assert "  net.channels: 32 -> 64\n" in err and "  master_seed: 5 -> 20260921\n" in err
    assert "  profile: 'cpu' -> 'laptop' (--profile)\n" not in err  # the name alone moves no number
    assert cli.main(["up", "r1", "--runs-dir", str(runs), "--no-doctor", "--profile", "cpu"]) == 0
    assert stack.started == [made]


def test_a_config_file_is_compared_with_the_record_and_drift_can_be_allowed(tmp_path, stack, capsys):
    runs = tmp_path / "runs"
    record(runs, "default", {"profile": "tiny"})
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps({"profile": "tiny", "runs_dir": str(runs), "master_seed": 7,
                                   "services": {"learner_port": 6000}}))
    assert cli.main(["up", "--config", str(changed), "--no-doctor"]) == 2
    err = capsys.readouterr().err
    assert "identity fields master_seed):\n  master_seed: 20260921 -> 7\n" in err
    assert "learner_port" not in err
    assert cli.main(["up", "--config", str(changed), "--no-doctor", "--allow-identity-drift"]) == 0
    assert stack.started[0].master_seed == 7 and stack.started[0].services.learner_port == 6000
    out = capsys.readouterr().out
    assert "  master_seed: 20260921 -> 7 (run identity: drift allowed)\n" in out
    assert "  services.learner_port: 5555 -> 6000\n" in out


def test_a_new_run_takes_the_machines_default_profile(tmp_path, stack, monkeypatch):
    monkeypatch.setattr(shared.config_load, "default_profile_name", lambda: "laptop")
    assert cli.main(["up", "fresh", "--runs-dir", str(tmp_path / "runs"), "--no-doctor"]) == 0
    assert stack.started[0].profile == "laptop" and stack.started[0].run_name == "fresh"


def test_up_help_says_which_options_change_the_run_identity(capsys):
    with pytest.raises(SystemExit):
        cli.main(["up", "--help"])
    out = capsys.readouterr().out
    assert "--rollouts, --battles-per-rollout, --algorithm, --profile other than the run's" in out
    assert "accepted and shown: --iterations, --timesteps" in out
    # what the help claims is what identity_changes decides
    base = load_config({"profile": "cpu"})
    for doc, moves in (({"local": {"rollouts": 3}}, True), ({"rollout": {"battles": 8}}, True),
                       ({"learner": {"algorithm": "dqn"}}, True), ({"timestep_limit": 9}, False),
                       ({"services": {"learner_port": 6000}}, False), ({"alarms": {"kl_high": 0.1}}, False)):
        moving, rest = identity_changes(base, load_config({"profile": "cpu", **doc}))
        assert bool(moving) is moves and bool(rest) is not moves, doc


# ----------------------------------------------------------------------------- the learner (Compose)


def test_a_compose_learner_without_its_env_resumes_with_the_runs_own_identity(tmp_path):
    runs = tmp_path / "runs"
    said = []
    laptop = load_config({"profile": "laptop", "runs_dir": str(runs), "services": {"host": "0.0.0.0"}})
    # first start: no record yet, so the learner writes one
    assert for_learner(laptop, str(runs), allow_identity_drift=False, say=said.append) == laptop
    assert (runs / "default" / "config.json").read_bytes() == dump_config(laptop) and said == []
    # recreated without the .env: FLEET_CONFIG falls back to cpu.json
    cpu = load_config({"profile": "cpu", "runs_dir": str(runs), "services": {"host": "0.0.0.0", "learner_port": 6000}})
    got = for_learner(cpu, str(runs), allow_identity_drift=False, say=said.append)
    assert identity_changes(laptop, got)[0] == {}
    assert got.net == laptop.net and got.ppo == laptop.ppo and got.rollout.battles == 32
    assert got.services.learner_port == 6000  # where it listens still comes from the given file
    assert said[0].startswith(f"learner: run 'default' resumes with its own config ({runs / 'default' / 'config.json'}) "
                              "where the given config would change its run identity:\n")
    assert "  net.channels: the run's 64, the given config's 32\n" in said[0]
    assert said[0].endswith("Compose: FLEET_ALLOW_IDENTITY_DRIFT=1 docker compose up -d learner) or start another "
                            "run_name.")
    assert (runs / "default" / "config.json").read_bytes() == dump_config(laptop)  # the record is kept


def test_a_compose_learner_with_drift_allowed_takes_the_given_config_and_records_it(tmp_path):
    runs = tmp_path / "runs"
    first = load_config({"profile": "tiny", "runs_dir": str(runs)})
    for_learner(first, str(runs), allow_identity_drift=False, say=print)
    changed = load_config({"profile": "tiny", "runs_dir": str(runs), "master_seed": 7})
    said = []
    assert for_learner(changed, str(runs), allow_identity_drift=True, say=said.append) == changed
    assert said == [] and (runs / "default" / "config.json").read_bytes() == dump_config(changed)


def test_identity_RUN_is_the_identity_of_the_runs_own_config(tmp_path, monkeypatch, capsys):
    import royalefleet.identity_cmd

    monkeypatch.setattr(shared.config_load, "default_profile_name", lambda: "laptop")
    seen = []
    monkeypatch.setattr(royalefleet.identity_cmd, "identity_for", lambda cfg: (seen.append(cfg), ({}, "x"))[1])
    runs = tmp_path / "runs"
    made = record(runs, "r1", {"profile": "cpu", "master_seed": 5, "services": {"wire_codec": 1}})
    assert cli.main(["identity", "r1", "--runs-dir", str(runs)]) == 0
    assert seen == [made]
    assert capsys.readouterr().out.endswith("run_id x\n")
