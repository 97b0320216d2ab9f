"""shared/run_dir.py owns the layout of ``runs/<name>/``: its paths, and that no other module
spells one of its file names."""

import json
import re
from pathlib import Path

import pytest

from shared import run_dir
from shared.run_dir import RunDir, check_run_name

ROOT = Path(__file__).resolve().parents[2]

NAMES = {v for k, v in vars(run_dir).items() if k.isupper() and isinstance(v, str) and k != "TAIL_BYTES"}
GENERIC = {"index.json", "config.json", "halt.json", "logs", "gates", "ladder"}
"""Names that other folders use too (a checkpoint's index, a bundle's config, a service's name,
a Grafana folder): only the run folder's distinctive names are searched for."""


def test_every_path_is_under_the_run_folder_where_the_docs_say():
    rd = RunDir.of("/r", "exp")
    assert rd.root == Path("/r/exp")
    assert rd.metrics == Path("/r/exp/metrics.jsonl")
    assert rd.purged == Path("/r/exp/metrics.purged.jsonl")
    assert rd.halted == Path("/r/exp/halted.json")
    assert rd.pool == Path("/r/exp/ladder/pool.json")
    assert rd.resident == Path("/r/exp/ladder/resident.json")
    assert rd.results == Path("/r/exp/ladder/results.jsonl")
    assert rd.strength == Path("/r/exp/ladder/strength.json")
    assert rd.gate_in_flight == Path("/r/exp/ladder/gate_in_flight.json")
    assert rd.gate_record("snap:0003") == Path("/r/exp/ladder/gates/snap_0003.json")
    assert rd.checkpoint(12) == Path("/r/exp/checkpoints/00000012")
    assert rd.checkpoint_index == Path("/r/exp/checkpoints/index.json")
    assert rd.bundle(7) == Path("/r/exp/bundles/7")
    assert rd.curves == Path("/r/exp/tensorboard")
    assert rd.held_episodes == Path("/r/exp/episodes.held.jsonl")
    assert rd.replays_index == Path("/r/exp/replays/index.json")


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "a\\b", "a\0b"])
def test_an_unusable_run_name_is_refused_naming_it(bad):
    assert check_run_name(bad) == f"run_name {bad!r} is not a usable folder name (one path component, no slash)"
    with pytest.raises(ValueError, match="not a usable folder name"):
        RunDir.of("/r", bad)
    assert check_run_name("exp-1") is None


def test_halt_mark_round_trips_and_an_undecodable_one_says_so(tmp_path):
    rd = RunDir(tmp_path)
    assert rd.read_halt_mark() is None
    rd.mark_halted(41, "kl exploded")
    assert json.loads(rd.halted.read_bytes()) == {"iteration": 41, "reason": "kl exploded"}
    assert rd.read_halt_mark() == "at iteration 41: kl exploded"
    rd.halted.write_bytes(b"{")
    assert rd.read_halt_mark().startswith(f"({rd.halted} is unreadable: ")
    rd.clear_halt()
    assert rd.read_halt_mark() is None


def test_alarms_purged_rows_and_the_last_row_skip_torn_lines(tmp_path):
    rd = RunDir(tmp_path)
    assert rd.read_alarms() == [] and rd.purged_rows() is None
    rd.append_alarms([b'{"alarm": "a", "iteration": 1}', b'{"alarm": "b", "iteration": 2}'])
    with open(rd.alarms, "ab") as fh:
        fh.write(b'{"alarm": "c"')
    assert [a["alarm"] for a in rd.read_alarms()] == ["a", "b"]
    rd.purged.write_bytes(b'{"run/iteration": 3}\n\n{"run/iteration": 4}\n')
    assert rd.purged_rows() == 2
    rd.metrics.write_bytes(b'{"run/iteration": 1}\n{"run/iteration": 2}\n{"run/iter')
    assert rd.last_metric_row() == {"run/iteration": 2}


def test_no_other_module_spells_a_file_name_of_the_run_folder():
    distinctive = sorted(NAMES - GENERIC)
    assert {"metrics.jsonl", "halted.json", "pool.json", "gate_in_flight.json", "episodes.held.jsonl",
            "tensorboard", "drift.json", "alarms.jsonl", "strength.json"} <= set(distinctive)
    # a quoted name, not the start of a docstring that opens with one (``"""pool.json's bytes``)
    literal = re.compile("(?<![\"'])[\"'](" + "|".join(re.escape(n) for n in distinctive) + ")[\"']")
    offenders = []
    for folder in ("shared", "services", "royalefleet"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "shared" / "run_dir.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if literal.search(line) and "add_parser(" not in line:  # the `checkpoints` command
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == [], "ask shared.run_dir.RunDir for the path instead:\n" + "\n".join(offenders)
