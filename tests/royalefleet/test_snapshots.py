"""``royalefleet snapshots`` (royalefleet/cmd_snapshots.py) on a run folder built by hand with
the services' own writers: each snapshot's player id, iteration, env steps and pool role, oldest
first; an unreadable spec costs only its own numbers; a missing run is named."""

from __future__ import annotations

import json

from royalefleet.cli import main
from tests.royalefleet.test_status import CAND, CHAMP, make_run

STRENGTH_ONLY = "snap:" + "0" * 15 + "3"


def write_snapshot(run, player: str, iteration: int, env_steps: int) -> None:
    d = run / "snapshots" / player.removeprefix("snap:")
    d.mkdir(parents=True)
    (d / "spec.json").write_text(json.dumps({"run_id": "r", "iteration": iteration, "env_steps": env_steps,
                                             "dtype": "float16"}))
    (d / "actor.safetensors").write_bytes(b"")


def test_every_snapshot_with_its_role_oldest_first(tmp_path, capsys):
    _, run = make_run(tmp_path)  # CHAMP admitted free (champion), CAND pending its gate
    write_snapshot(run, CAND, 20, 200)
    write_snapshot(run, STRENGTH_ONLY, 10, 150)
    write_snapshot(run, CHAMP, 5, 100)
    broken = run / "snapshots" / ("0" * 15 + "4")
    broken.mkdir()
    (broken / "spec.json").write_text("{not json")
    (run / "snapshots" / ("0" * 15 + "5.partial")).mkdir()  # a write the store had not finished: not listed
    assert main(["snapshots", "r", "--runs-dir", str(tmp_path), "--profile", "tiny"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "player                 iteration   env_steps  role           strength rating (Elo, noop = 0)",
        f"{CHAMP}" + " " * 10 + "5" + " " * 9 + "100  champion       -",
        f"{STRENGTH_ONLY}" + " " * 9 + "10" + " " * 9 + "150  strength only  -",
        f"{CAND}" + " " * 9 + "20" + " " * 9 + "200  pending gate   -",
        f"snap:{'0' * 15}4" + " " * 10 + "?" + " " * 11 + "?  strength only  -",
        f"4 snapshot(s); evaluate the newest with `royalefleet eval snap:{'0' * 15}4 scripted:random_legal "
        f"--run-name r --runs-dir {tmp_path}` (or `eval latest ...`)",
    ]
    assert main(["snapshots", "--run-name", "r", "--runs-dir", str(tmp_path), "--profile", "tiny", "--json"]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first == {"player": CHAMP, "iteration": 5, "env_steps": 100, "role": "champion", "rating": None,
                     "rating_se": None}


def test_a_clone_outside_the_pool_is_called_a_clone(tmp_path, capsys):
    _, run = make_run(tmp_path)
    write_snapshot(run, STRENGTH_ONLY, 0, 0)
    spec = run / "snapshots" / STRENGTH_ONLY.removeprefix("snap:") / "spec.json"
    spec.write_text(json.dumps({**json.loads(spec.read_text()), "clone": {"demos_digest": "d" * 16}}))
    assert main(["snapshots", "r", "--runs-dir", str(tmp_path), "--profile", "tiny", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["role"] == "clone"


def test_a_run_without_snapshots_and_a_missing_run(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["snapshots", "empty", "--runs-dir", str(tmp_path), "--profile", "tiny"]) == 1  # EMPTY_LISTING
    assert capsys.readouterr().out.startswith("run 'empty' has no snapshot yet")
    assert main(["snapshots", "nope", "--runs-dir", str(tmp_path), "--profile", "tiny"]) == 2
    assert capsys.readouterr().err.startswith(f"royalefleet snapshots: no run 'nope': there is no folder "
                                              f"{tmp_path / 'nope'}; runs in {tmp_path}: empty. ")
