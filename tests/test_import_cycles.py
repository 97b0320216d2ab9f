"""No import circles inside the project: every import of royalefleet/, services/ and shared/
(at the top of a module or inside a function, which runs just the same), read with ``ast``,
forms a graph with no cycle. Imports under ``if TYPE_CHECKING:`` are annotations only and
left out of that graph; inside ``services/learner/`` they count too (issue 36: an annotation
is a dependency a reader follows), and that graph has no cycle either."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("royalefleet", "services", "shared")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def imports_of(name: str, path: Path, modules: dict[str, Path], annotations: bool = False) -> set[str]:
    """The project modules ``name`` imports at run time (``from pkg import mod`` counts as
    ``pkg.mod`` when that is a module); with ``annotations``, those under ``if TYPE_CHECKING:``
    too."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not annotations:
            for n in node.orelse:
                visit(n)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                anchor = here[: len(here) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in out if m in modules and m != name}


def import_graph(annotations: bool = False, within: str = "") -> dict[str, set[str]]:
    """Each project module's project imports (``annotations``: TYPE_CHECKING ones too); with
    ``within``, only the modules under that package and their imports among themselves."""
    modules = project_modules()
    graph = {name: imports_of(name, path, modules, annotations) for name, path in modules.items()}
    if within:
        graph = {n: {m for m in deps if m.startswith(within)} for n, deps in graph.items() if n.startswith(within)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


def test_the_cycle_finder_finds_a_two_module_circle_and_nothing_in_a_chain():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_relative_and_type_checking_imports_are_read_as_python_runs_them(tmp_path):
    pkg = tmp_path / "pkg.py"
    pkg.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x.y\nelse:\n    import x.z\n"
                   "def f():\n    from x import w\n    from . import v\n")
    modules = {"x.y": pkg, "x.z": pkg, "x.w": pkg, "x.v": pkg, "x": pkg}
    assert imports_of("x.q", pkg, modules) == {"x", "x.z", "x.w", "x.v"}
    assert imports_of("x.q", pkg, modules, annotations=True) == {"x", "x.y", "x.z", "x.w", "x.v"}


def test_the_project_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (each a set of modules that import each other, directly or not):\n" + "\n".join(
        "  " + " <-> ".join(c) for c in found)


def test_the_learner_has_no_import_cycle_counting_annotations():
    """services/learner/ with its TYPE_CHECKING imports counted: no circle (issue 36; the
    package's own __init__ modules import nothing of it)."""
    found = cycles(import_graph(annotations=True, within="services.learner"))
    assert not found, "import cycles in services/learner/, annotation imports counted:\n" + "\n".join(
        "  " + " <-> ".join(c) for c in found)

