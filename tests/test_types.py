"""The learner type-checks: mypy over ``services/learner/`` with the ``[tool.mypy]`` settings of
pyproject.toml. Its parts and state are declared (``services/learner/parts.py``), so a stage
that reads a part nobody declared, or passes one of the wrong kind, fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["services/learner"]


def test_mypy_passes_on_the_learner():
    api = pytest.importorskip("mypy.api", reason="mypy is in the dev extra: pip install -e '.[dev]'")
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), *(str(ROOT / p) for p in CHECKED)])
    assert status == 0, f"mypy found problems in {', '.join(CHECKED)}:\n{out}{err}"
    assert "Success: no issues found" in out
