"""``set_deterministic_algorithms``: the run_exact flag set in ATen without importing the
inductor (services/learner/determinism.py), checked in fresh interpreters."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _child(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env=os.environ | {"PYTHONPATH": REPO})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_the_flag_is_set_and_cleared_without_importing_the_inductor():
    got = _child(
        "import json, sys, torch\n"
        "from services.learner.determinism import set_deterministic_algorithms\n"
        "before = torch.are_deterministic_algorithms_enabled()\n"
        "set_deterministic_algorithms(True)\n"
        "on = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()\n"
        "set_deterministic_algorithms(False)\n"
        "print(json.dumps({'before': before, 'on': on, 'off': torch.are_deterministic_algorithms_enabled(),\n"
        "                  'inductor': 'torch._inductor.config' in sys.modules}))")
    assert got == {"before": False, "on": [True, False], "off": False, "inductor": False}


def test_an_inductor_already_imported_gets_the_flag_as_the_public_call_sets_it():
    got = _child(
        "import json, torch, torch._inductor.config as ic\n"
        "from services.learner.determinism import set_deterministic_algorithms\n"
        "set_deterministic_algorithms(True)\n"
        "on = ic.deterministic\n"
        "set_deterministic_algorithms(False)\n"
        "print(json.dumps([on, ic.deterministic, torch.are_deterministic_algorithms_enabled()]))")
    assert got == [True, False, False]

