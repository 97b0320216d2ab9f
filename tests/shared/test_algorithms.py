"""The learner algorithms' declarations (shared/algorithms.py): one table, and an algorithm's
footprint outside its folder is its lines in the registries."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from services.learner.registry import ALGORITHMS as FACTORIES
from shared.algorithms import ALGORITHMS, algorithm, algorithm_names, declared

ROOT = Path(__file__).resolve().parents[2]
REGISTRIES = {"shared/algorithms.py", "services/learner/registry.py"}
"""The two tables an algorithm is listed in: its declaration and its learner factory."""

TOY = '''
"""A throwaway learner algorithm's declaration, as an algorithm folder's would be."""
from __future__ import annotations
from typing import Any
from shared.algorithm_spec import AlgorithmSpec
from shared.config_types import ConfigSection, PosFloat


class ToySection(ConfigSection):
    """The toy algorithm's settings."""

    temperature: PosFloat = 1.5
    """Softmax temperature of the toy's targets, dimensionless."""


def settings(cfg) -> ToySection:
    return getattr(cfg, "toy")


def problems(cfg) -> list[str]:
    return ["toy.temperature: 7 is unlucky; choose another"] if settings(cfg).temperature == 7 else []


SPEC = AlgorithmSpec(
    "toy", "a throwaway learner", section=ToySection, section_doc="The toy learner's settings.",
    row_keys={"toy/loss": ("nats", "the toy's loss")},
    seed_streams={"toy/draw/iteration/{iteration}": "the toy's draws of one iteration"},
    identity=lambda cfg: {"algorithm": "toy", "toy": settings(cfg)}, problems=problems)
'''

PROBE = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import shared.algorithms
from toyalgo import declare
shared.algorithms.ALGORITHMS = (*shared.algorithms.ALGORITHMS, declare.SPEC)  # the registry's line
import msgspec
from royalefleet.cli import build_parser
from shared import config_docs
from shared.config import ConfigError, load_config
from shared.config_load import dump_config
from shared.identity import config_digests
from shared.metric_schema import SCHEMA, prometheus_name
from shared.seeding import derive_int, stream_path

def cfg(algorithm, **over):
    return load_config({"profile": "tiny", "learner": {"algorithm": algorithm}, **over})

toy, warm = cfg("toy"), cfg("toy", toy={"temperature": 2.0})
ppo, ppo_warm = cfg("ppo"), cfg("ppo", toy={"temperature": 2.0})
try:
    cfg("toy", toy={"temperature": 7})
    refused = ""
except ConfigError as exc:
    refused = str(exc)
try:
    cfg("toy", toy={"temprature": 2.0})
    typo = ""
except ConfigError as exc:
    typo = str(exc)
up = next(a for a in build_parser()._subparsers._group_actions[0].choices["up"]._actions if a.dest == "algorithm")
print(json.dumps({
    "temperature": warm.toy.temperature,
    "last_key": list(json.loads(dump_config(warm)))[-1],
    "dumped": json.loads(dump_config(warm))["toy"],
    "digest_moves": config_digests(toy)["algo_digest"] != config_digests(warm)["algo_digest"],
    "ppo_untouched": config_digests(ppo) == config_digests(ppo_warm),
    "toy_vs_ppo": config_digests(toy)["algo_digest"] != config_digests(ppo)["algo_digest"],
    "refused": refused, "typo": typo,
    "choices": list(up.choices), "help": up.help,
    "schema": SCHEMA.get("toy/loss"), "gauge": prometheus_name("toy/loss")[0],
    "stream": stream_path("toy/draw/iteration/{iteration}", iteration=3),
    "draw": derive_int(7, "toy/draw/iteration/3"),
    "explained": [f.path for f in config_docs.fields() if f.path.startswith("toy")],
    "docs": [f.doc for f in config_docs.fields() if f.path.startswith("toy")],
}))
'''


def test_a_new_algorithm_is_its_declaration_module_and_one_table_entry(tmp_path):
    """A package outside the tree, listed in ``ALGORITHMS`` (monkeypatched, in a fresh process,
    before the config is imported): the config takes its section (defaults, a set value, its rule,
    a typo refused), ``up --algorithm`` offers it, the metric schema and the seed table hold its
    keys, its section moves the algo digest only when it is the algorithm, and ``config
    --explain`` documents it. No file of the tree is edited."""
    (tmp_path / "toyalgo").mkdir()
    (tmp_path / "toyalgo" / "__init__.py").write_text("")
    (tmp_path / "toyalgo" / "declare.py").write_text(textwrap.dedent(TOY))
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["temperature"] == 2.0 and got["dumped"] == {"temperature": 2.0} and got["last_key"] == "toy"
    assert got["digest_moves"] and got["ppo_untouched"] and got["toy_vs_ppo"]
    assert "toy.temperature: 7 is unlucky; choose another" in got["refused"]
    assert "temprature" in got["typo"]
    assert got["choices"] == ["ppo", "dqn", "alphazero", "expert_iteration", "treestrap", "toy"]
    assert got["help"].endswith("or toy (a throwaway learner)")
    assert got["schema"] == ["nats", "the toy's loss"] and got["gauge"] == "royalefleet_learner_toy_loss"
    assert got["stream"] == "toy/draw/iteration/3" and isinstance(got["draw"], int)
    assert got["explained"] == ["toy", "toy.temperature"]
    assert got["docs"] == ["The toy learner's settings.", "Softmax temperature of the toy's targets, dimensionless."]


def test_the_table_names_every_registered_learner_in_order():
    assert algorithm_names() == ("ppo", "dqn", "alphazero", "expert_iteration", "treestrap")
    assert set(FACTORIES) == set(algorithm_names())
    with pytest.raises(KeyError, match=r"learner.algorithm 'a2c' is not declared; declared: ppo, dqn, alphazero, "
                                       r"expert_iteration, treestrap \(shared/algorithms.py\)"):
        algorithm("a2c")
    assert [s.name for s in ALGORITHMS if s.searches] == ["alphazero", "expert_iteration", "treestrap"]


def test_a_key_two_algorithms_declare_is_refused_by_name(monkeypatch):
    import shared.algorithms as table
    from shared.algorithm_spec import AlgorithmSpec

    twin = AlgorithmSpec("twin", row_keys={"expit/generation": ("count", "a clash")})
    monkeypatch.setattr(table, "ALGORITHMS", (*table.ALGORITHMS, twin))
    with pytest.raises(ValueError, match=r"row_keys 'expit/generation': declared by two algorithms \(the second twin\)"):
        declared("row_keys")
    monkeypatch.setattr(table, "ALGORITHMS", (AlgorithmSpec("own", seed_streams={"torch/init": "a clash"}),))
    with pytest.raises(ValueError, match=r"seed_streams torch/init: declared by an algorithm and already in "
                                         r"shared/seeding.py; rename it"):
        table.merged({"torch/init": "weights"}, "seed_streams", "shared/seeding.py")


def _algorithm_folders() -> dict[str, str]:
    """Each declared algorithm whose section is declared in its own folder: name -> that folder."""
    return {spec.name: "/".join(spec.section.__module__.split(".")[:3]) for spec in ALGORITHMS
            if spec.section is not None and spec.section.__module__.startswith("services.learner.")}


def _tree_files() -> list[str]:
    """The checkout's files (tracked, and new ones git does not ignore), but docs/ and tests/."""
    try:
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True,
                                cwd=ROOT, check=True, timeout=60).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the files of the tree are not listed")
    return [p for p in listed if not p.startswith(("docs/", "tests/")) and (ROOT / p).is_file()]


def test_an_algorithm_is_named_outside_its_folder_only_by_the_registries():
    folders = _algorithm_folders()
    assert folders == {"expert_iteration": "services/learner/expert_iteration",
                       "treestrap": "services/learner/treestrap"}
    files = _tree_files()
    assert "shared/config_schema.py" in files and "README.md" in files  # the check looks where it should
    for name, folder in folders.items():
        pattern = re.compile(rf"\b{name}\b")
        outside = []
        for path in files:
            if path.startswith(folder + "/") or path in REGISTRIES:
                continue
            if any(path.startswith(other + "/") for other in folders.values()):
                continue  # another algorithm built on this one (treestrap on expert_iteration) may import it
            try:
                text = (ROOT / path).read_text()
            except UnicodeDecodeError:
                continue  # an image
            outside += [f"{path}:{n}" for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
        assert not outside, f"{name} is named outside {folder}/ and the registries: {outside}"
        for registry in REGISTRIES:
            assert pattern.search((ROOT / registry).read_text()), registry


@pytest.mark.parametrize("name", ["ppo", "dqn", "alphazero", "expert_iteration", "treestrap"])
def test_replay_refuses_the_learner_seat_of_exactly_the_searching_algorithms(tmp_path, name):
    """``royalefleet replay`` reads ``searches`` from the table: a searched learner seat is not
    replayed (its decisions were the search's), another goes on to the weights check."""
    from types import SimpleNamespace as NS

    from royalefleet.replay_training import NotReplayable, plan
    from shared.config import load_config

    cfg = load_config({"profile": "tiny", "learner": {"algorithm": name}, "alphazero": {"leaf_value": "critic"}})
    span = NS(iteration=2, actor_digest="0" * 16, decisions=3)  # no checkpoint of 1 in tmp_path
    rec = NS(battle=0, ordinal=0, iteration=2, role="scripted", seat="blue", player="learner",
             opponent="scripted:noop", provenance=NS(spans=[span]))
    with pytest.raises(NotReplayable) as refused:
        plan(cfg, [NS(record=rec)], rec, tmp_path, None)
    searched = f"its choice decisions played the rollouts' search (learner.algorithm {name})"
    assert (searched in str(refused.value)) == algorithm(name).searches == (name in ("alphazero", "expert_iteration", "treestrap"))
