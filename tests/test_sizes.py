"""Issue 29's size target: no class over 300 lines and no function over 120 lines in shared/,
services/ and royalefleet/, read with ``ast`` (a definition's lines are ``end_lineno - lineno + 1``,
its docstring and comments included; a method counts as a function and inside its class).
Past those sizes a unit does more than one job and its diffs stop fitting on a screen: split it
(helper functions, or a second small class with one job) rather than raise the limit."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("shared", "services", "royalefleet")
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 120


def oversized() -> list[str]:
    """``path:line name (N lines)`` of each class over MAX_CLASS_LINES and each function or
    method over MAX_FUNCTION_LINES, nested ones included, paths relative to the repository."""
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    limit = MAX_CLASS_LINES
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    limit = MAX_FUNCTION_LINES
                else:
                    continue
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_no_class_or_function_is_over_the_size_target():
    found = oversized()
    assert not found, (
        f"over the size target (classes {MAX_CLASS_LINES} lines, functions {MAX_FUNCTION_LINES}; issue 29): "
        "split each into smaller pieces (helper functions, or a second class with one job) rather than "
        "raising the limit:\n" + "\n".join(found))


def test_the_walk_sees_the_packages():
    # A moved tree would pass the test above by finding nothing.
    assert all((ROOT / pkg / "__init__.py").exists() for pkg in PACKAGES)
    assert sum(1 for pkg in PACKAGES for _ in (ROOT / pkg).rglob("*.py")) > 50
