"""The rollout image has no torch: the rollout service and everything it imports from shared/
must load (and build a battle) without importing it."""

import json
import pathlib
import pkgutil
import subprocess
import sys

import shared

ROOT = pathlib.Path(__file__).resolve().parents[3]
SHARED = sorted(f"shared.{m.name}" for m in pkgutil.iter_modules(shared.__path__))
"""Every shared module, plus the package shared.nn itself (its __init__ is torch-free); the
modules INSIDE shared.nn are the torch half, used by the learner and evaluator only."""


def run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_shared_module_is_checked():
    # SHARED is discovered, so a new shared module is checked without editing this file.
    assert len(SHARED) >= 9 and {"shared.codec", "shared.messages", "shared.transport"} <= set(SHARED)


def test_rollout_and_shared_import_without_torch():
    modules = ["services.rollout", "services.rollout.main", "services.rollout.service", "services.rollout.battles",
               "services.rollout.metrics", *SHARED]
    code = (
        "import importlib, json, sys\n"
        f"mods = {modules!r}\n"
        "for m in mods: importlib.import_module(m)\n"
        "print(json.dumps({'torch': sorted(k for k in sys.modules if k == 'torch' or k.startswith('torch.')),"
        " 'loaded': [m for m in mods if m in sys.modules]}))\n"
    )
    result = run(code)
    assert result["loaded"] == modules  # the check is not vacuous: every module did load
    assert result["torch"] == []


def test_a_rollout_builds_battles_and_scripted_players_without_torch():
    """What a rollout does at run time (build the env, read the engine build, make scripted
    players, start an episode) must not pull torch in lazily either."""
    code = (
        "import json, sys\n"
        "import numpy as np\n"
        "from shared.config import EnvConfig\n"
        "from shared.envs import build_env, engine_build, obs_spec\n"
        "from services.rollout.battles import make_scripted\n"
        "env = build_env(EnvConfig(max_steps=20))\n"
        "build = engine_build(env); spec = obs_spec(env)\n"
        "player = make_scripted('scripted:random_legal', 0.5)\n"
        "obs, _ = env.reset(seed=1)\n"
        "a = player.act(obs['red'], obs['red']['action_mask'], np.random.default_rng(0))\n"
        "env.step({'blue': 0, 'red': int(a)})\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'royalegym': 'royalegym' in sys.modules,"
        " 'planes': len(spec.plane_names)}))\n"
    )
    assert run(code) == {"torch": False, "royalegym": True, "planes": 20}


def test_the_rollout_entry_point_parses_its_flags_without_torch():
    code = (
        "import json, runpy, sys\n"
        "sys.argv = ['services.rollout', '--help']\n"
        "try:\n"
        "    runpy.run_module('services.rollout', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "print(json.dumps({'exit': code, 'torch': 'torch' in sys.modules,"
        " 'service': 'services.rollout.service' in sys.modules}))\n"
    )
    assert run(code) == {"exit": 0, "torch": False, "service": True}
