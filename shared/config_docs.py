"""What every config field means: ``royalefleet config --explain [FIELD]``.

A field's documentation is the string literal written on the line below it in its struct
(shared/config.py), the convention the structs already follow::

    clip_range: Annotated[float, Meta(gt=0.0, lt=1.0)] = 0.2
    '''PPO's clip epsilon: the probability ratio is clipped to [1 - eps, 1 + eps] ...'''

(written with double quotes in the file).

It says the unit, what the field changes, and anything about its range the type cannot say.
The rest is read off the code, so it cannot drift from it: the type and range from the
annotation (``msgspec.Meta`` bounds, ``Literal`` choices), the default from each profile, and
whether the field is in the run identity by changing it alone and comparing
``shared.identity.config_identity`` before and after. A section (a struct-typed field such as
``ppo``) is documented by its struct's class docstring. ``tests/shared/test_config_docs.py`` fails
naming any field without a docstring.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any, get_args, get_type_hints

import msgspec
from msgspec import Struct

from shared.algorithms import algorithm_sections
from shared.config import PROFILES, LearnerConfig, RunConfig
from shared.config_schema import RunConfigFields
from shared.identity import config_identity

_CHANGED = "<changed by --explain>"


@dataclass(frozen=True)
class FieldDoc:
    """One config field. ``path``: dotted (``ppo.clip_range``; a list's element fields as
    ``ladder.pool.seed_snapshots[].path``); ``owner``/``name``: its struct and attribute;
    ``line``: where it is declared in ``source``; ``doc``: its docstring, "" when it has none;
    ``section``: a struct-typed field (documented by the struct's class docstring)."""

    path: str
    owner: type[Struct]
    name: str
    annotation: Any
    source: str
    line: int
    doc: str
    section: bool


def _field_docstrings(cls: type) -> dict[str, tuple[str, int]]:
    """attribute -> (docstring or "", absolute line number) for the annotated fields of ``cls``."""
    lines, first = inspect.getsourcelines(cls)
    body = ast.parse(textwrap.dedent("".join(lines))).body[0].body
    out = {}
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            nxt = body[i + 1] if i + 1 < len(body) else None
            doc = ""
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                doc = inspect.cleandoc(nxt.value.value)
            out[node.target.id] = (doc, first + node.lineno - 1)
    return out


def _struct_of(tp: Any) -> tuple[type[Struct] | None, bool]:
    """(the struct a field holds, whether it is a list of them) or (None, False) for a leaf."""
    if isinstance(tp, type) and issubclass(tp, Struct):
        return tp, False
    args = getattr(tp, "__args__", ())
    if getattr(tp, "__origin__", None) is list and len(args) == 1 and isinstance(args[0], type) \
            and issubclass(args[0], Struct):
        return args[0], True
    return None, False


def _algorithm_sections() -> dict[str, tuple[str, int, str]]:
    """RunConfig's algorithm sections (shared/algorithms.py): name -> (the declaration's
    ``section_doc``, the section class's line, its source file)."""
    out = {}
    for spec in algorithm_sections():
        _, line = inspect.getsourcelines(spec.section)
        out[spec.name] = (spec.section_doc, line, inspect.getsourcefile(spec.section) or "?")
    return out


def _walk(struct: type[Struct], prefix: str) -> list[FieldDoc]:
    if struct is RunConfig:  # built from RunConfigFields and the algorithms' sections
        docs = _field_docstrings(RunConfigFields)
        declared = _algorithm_sections()
    else:
        docs, declared = _field_docstrings(struct), {}
    out = []
    for f in msgspec.structs.fields(struct):
        path = f"{prefix}{f.encode_name}"
        sub, is_list = _struct_of(f.type)
        doc, line = docs.get(f.name, ("", 0))
        source = inspect.getsourcefile(struct) or "?"
        if f.name in declared:
            doc, line, source = declared[f.name]
        if sub is not None and not is_list:
            out.append(FieldDoc(path, struct, f.name, f.type, source, line, doc or inspect.cleandoc(sub.__doc__ or ""),
                                True))
            out += _walk(sub, path + ".")
        else:
            out.append(FieldDoc(path, struct, f.name, f.type, source, line, doc, False))
            if sub is not None:
                out += _walk(sub, path + "[].")
    return out


def fields() -> list[FieldDoc]:
    """Every field of ``RunConfig``, sections before their fields, in declaration order, then
    every installed extension section (``extension_fields``)."""
    return _walk(RunConfig, "") + extension_fields()


def extension_fields() -> list[FieldDoc]:
    """The extension sections (``shared.extensions``: RoyaleFleet's ``imitation`` and
    ``warm_start``, and any an installed package declares), each documented by its schema's
    class docstring, then its fields; a section whose schema does not load is left out (its use
    is refused by ``load_config``, naming why)."""
    from shared.extensions import _schema, providers

    out: list[FieldDoc] = []
    for key, found in sorted(providers().items()):
        try:
            schema = _schema(found[0])
        except Exception:  # noqa: BLE001 -- a broken package's section is refused where it is used
            continue
        source = inspect.getsourcefile(schema) or "?"
        out.append(FieldDoc(key, schema, key, schema, source, 0, inspect.cleandoc(schema.__doc__ or ""), True))
        out += _walk(schema, key + ".")
    return out


def _extension_key(path: str) -> str | None:
    """The extension section ``path`` is in, None for a ``RunConfig`` field."""
    from shared.extensions import providers

    head = path.split(".", 1)[0]
    return head if head not in RunConfig.__struct_fields__ and head in providers() else None


# ----------------------------------------------------------------------------- read off the code


def type_text(tp: Any) -> str:
    """The type and range of an annotation in words: ``int, >= 1``, ``one of "hard", "linear"``."""
    return _info_text(msgspec.inspect.type_info(tp))


def _info_text(t: msgspec.inspect.Type) -> str:
    mi = msgspec.inspect
    if isinstance(t, (mi.IntType, mi.FloatType)):
        name = "int" if isinstance(t, mi.IntType) else "float"
        bounds = [f"{op} {v:g}" for op, v in ((">=", t.ge), (">", t.gt), ("<=", t.le), ("<", t.lt)) if v is not None]
        return name + (", " + " and ".join(bounds) if bounds else "")
    if isinstance(t, mi.LiteralType):
        return "one of " + ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in t.values)
    if isinstance(t, mi.BoolType):
        return "true or false"
    if isinstance(t, mi.StrType):
        return "string"
    if isinstance(t, mi.TupleType):
        return "[" + ", ".join(f"({_info_text(x)})" for x in t.item_types) + "]"
    if isinstance(t, (mi.ListType, mi.VarTupleType)):
        return f"list of ({_info_text(t.item_type)})"
    if isinstance(t, mi.DictType):
        return f"object: {_info_text(t.key_type)} -> ({_info_text(t.value_type)})"
    if isinstance(t, mi.UnionType):
        return " | ".join(_info_text(x) for x in t.types)
    if isinstance(t, mi.StructType):
        return t.cls.__name__
    return type(t).__name__.removesuffix("Type").lower()


def _get(cfg: Any, path: str) -> Any:
    for part in path.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _with(cfg: Struct, path: str, value: Any) -> Struct:
    """``cfg`` with the field at ``path`` set to ``value``, unvalidated (only digested)."""
    head, _, rest = path.partition(".")
    return msgspec.structs.replace(cfg, **{head: _with(getattr(cfg, head), rest, value) if rest else value})


def identity_fields(path: str) -> list[str]:
    """The run-identity fields (``shared.identity.RunIdentity``) a change of this config field
    alone moves, for every profile; [] when it is recorded but not in the identity. A list's
    element field is in it when the list is."""
    path = path.split("[]", 1)[0]
    moved: set[str] = set()
    # under every learner algorithm: the dqn and alphazero sections count only under theirs
    algorithms = get_args(get_type_hints(LearnerConfig)["algorithm"])
    for make in PROFILES.values():
        for algorithm in algorithms:
            cfg = _with(make(), "learner.algorithm", algorithm)
            before = config_identity(cfg)
            after = config_identity(_with(cfg, path, _CHANGED))
            moved |= {k for k in before if before[k] != after[k]}
    return sorted(moved)


def _default(path: str) -> str:
    """The cpu profile's value, and the other profiles' where they differ."""
    if "[]" in path:
        return "(per entry)"
    values = {name: _get(make(), path) for name, make in PROFILES.items()}
    text = lambda v: msgspec.json.encode(v).decode()  # noqa: E731
    base = values["cpu"]
    others = [f"{name} {text(v)}" for name, v in values.items() if name != "cpu" and v != base]
    return text(base) + (f" (cpu; {', '.join(others)})" if others else "")


# ----------------------------------------------------------------------------- explain


class UnknownField(KeyError):
    """A path that names no config field; the message names the closest ones."""

    def __str__(self) -> str:
        return self.args[0]


def lookup(path: str) -> list[FieldDoc]:
    """The field at ``path`` (a section: it and every field under it). Raises UnknownField with
    the close matches."""
    every = fields()
    found = [f for f in every if f.path == path or f.path.startswith(path + ".") or f.path.startswith(path + "[]")]
    if found:
        return found
    paths = [f.path for f in every]
    leaf = path.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(path, paths, n=5, cutoff=0.6)
    close += [p for p in paths if leaf and leaf in p.rsplit(".", 1)[-1] and p not in close][:5 - len(close)]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownField(f"config field {path!r}: no such field{hint} (`royalefleet config --explain` lists every field)")


def explain_one(f: FieldDoc, width: int = 100) -> str:
    """A field's entry: its path, where it is declared, type and range, default, run identity,
    and its documentation."""
    where = (f"{f.owner.__name__}, {_relative(f.source)}" if f.owner is f.annotation  # an extension section
             else f"{f.owner.__name__}.{f.name}, {_relative(f.source)}:{f.line}")
    if f.section:
        head = [f"{f.path}  [section: {where}]"]
        if _extension_key(f.path) == f.path:
            head.append("  extension section (shared/extensions.py): absent unless the config names it; when named, "
                        "its settings' digest and providing package are in the run identity (extension_records)")
    elif _extension_key(f.path):
        head = [f"{f.path}  [{where}]",
                f"  type      {type_text(f.annotation)}",
                f"  default   {msgspec.json.encode(getattr(f.owner(), f.name)).decode()}",
                "  identity  yes, when its section is named (the section's digest, extension_records)"]
    else:
        ident = identity_fields(f.path)
        head = [f"{f.path}  [{where}]",
                f"  type      {type_text(f.annotation)}",
                f"  default   {_default(f.path)}",
                f"  identity  " + (f"yes ({', '.join(ident)})" if ident else "no (recorded and diffed on resume; "
                                                                              "never refused)")]
    body = [textwrap.fill(p, width, initial_indent="  ", subsequent_indent="  ")
            for p in (f.doc or "(no documentation: add a docstring under the field)").split("\n\n")]
    return "\n".join(head + body)


def explain(path: str | None = None) -> str:
    """Every field (``path`` None or ""), or the field or section at ``path``. Raises UnknownField."""
    chosen = fields() if not path else lookup(path)
    return "\n\n".join(explain_one(f) for f in chosen) + "\n"


def _relative(source: str) -> str:
    import os

    tree = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if source.startswith(tree + os.sep):
        return source[len(tree) + 1:]
    marker = "/shared/"
    return "shared/" + source.rsplit(marker, 1)[1] if marker in source else source
