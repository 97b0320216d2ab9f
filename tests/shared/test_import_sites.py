"""Data never names code: the tree's only imports by name are shared.components.resolve (a
config's component, checked against this machine's allow-list) and shared.extensions (the
entry points of installed packages, and RoyaleFleet's own sections by constant). A new
``import_module``, ``__import__``, ``exec``/``eval``, ``runpy``, ``pickle`` or ``torch.load``
anywhere else in the code is a failure here: route it through resolve, or argue it in
docs/design.md ("One function turns data into code") and add it below."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATTERN = re.compile(r"import_module\(|__import__\(|(?<![.\w])(exec|eval)\(|\bimport runpy|import pickle|pickle\.load"
                     r"|torch\.load\(|import marshal|\b(ep|entry_point)\.load\(\)")
ALLOWED = {
    ("shared/components.py", "mod = importlib.import_module(module)"),  # resolve: the one import of a config's name
    ("shared/extensions.py", "return getattr(importlib.import_module(module), name)"),  # FIRST_PARTY constants
    ("shared/extensions.py", "obj = ep.load()"),  # an installed package's entry point (local install)
}


def sites() -> set[tuple[str, str]]:
    found = set()
    for folder in ("royalefleet", "shared", "services"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line in path.read_text().splitlines():
                code = line.split("#")[0] if not line.lstrip().startswith(("\"", "'")) else ""
                if PATTERN.search(code):
                    found.add((path.relative_to(ROOT).as_posix(), line.strip()))
    return found


def test_the_only_imports_by_name_are_resolve_and_installed_entry_points():
    assert sites() == ALLOWED


def test_the_grep_finds_what_it_is_for():
    # the pattern itself, on lines an attacker-friendly change would add
    for line in ("mod = importlib.import_module(cfg.module)", "fn = __import__(name)", "exec(code)",
                 "x = eval(text)", "import runpy", "pickle.loads(blob)", "torch.load(path)", "ep.load()", "import pickle"):
        assert PATTERN.search(line), line
    for line in ("model.eval()", "cmd_eval(args)", "self.evaluate(x)", "json.loads(b)", "courier.load()",
                 "No pickle anywhere"):
        assert not PATTERN.search(line), line
