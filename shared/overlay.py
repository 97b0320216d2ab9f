"""A config document laid over a struct's defaults, every leaf validated on its own, so that
one pass finds every problem (each naming its dotted field). ``shared.config.load_config``
overlays a profile with a file and the command line's overrides; ``shared.extensions``
overlays an extension section's defaults with the file's section."""

from __future__ import annotations

import difflib
import typing
from typing import Any, Literal

import msgspec
from msgspec import Struct


def struct_type(tp: Any) -> type[Struct] | None:
    """``tp`` when it is a msgspec Struct class (a nested section), else None (a leaf)."""
    return tp if isinstance(tp, type) and issubclass(tp, Struct) else None


def overlay(base: dict, doc: Any, struct: type[Struct], path: str, problems: list[str]) -> dict:
    """Apply ``doc`` on top of ``base`` (a builtins dict of ``struct``), validating each leaf
    on its own so that every problem is found in one pass. ``path``: the dotted field ``doc``
    sits at ("" at the top). Problems (an unknown field with the nearest known one, a value of
    the wrong type with the known values of a Literal) are appended to ``problems``; the
    fields that had one keep ``base``'s value."""
    if not isinstance(doc, dict):
        problems.append(f"{path or '<top>'}: expected an object, got {type(doc).__name__} {doc!r}")
        return base
    fields = {f.encode_name: f for f in msgspec.structs.fields(struct)}
    out = dict(base)
    for key, value in doc.items():
        where = f"{path}.{key}" if path else key
        if key not in fields:
            hint = difflib.get_close_matches(str(key), list(fields), n=1)
            problems.append(
                f"{where}: unknown field"
                + (f"; did you mean {hint[0]!r}?" if hint else f"; {struct.__name__} has {', '.join(fields)}")
            )
            continue
        sub = struct_type(fields[key].type)
        if sub is not None:
            out[key] = overlay(base.get(key, {}), value, sub, where, problems)
            continue
        try:
            converted = msgspec.convert(value, fields[key].type, strict=True)
            out[key] = msgspec.to_builtins(converted)
        except msgspec.ValidationError as exc:
            known = literal_values(fields[key].type) if "Invalid enum value" in str(exc) else ()
            problems.append(f"{where}: {exc} (got {value!r})".replace(" - at `$`", "")
                            + (f"; known: {', '.join(map(str, known))}" if known else ""))
    return out


def literal_values(tp: Any) -> tuple:
    """The values of the first ``Literal`` inside ``tp`` (list[Literal[...]] included), for a
    refusal that names the known ones; () when there is none."""
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    for arg in typing.get_args(tp):
        found = literal_values(arg)
        if found:
            return found
    return ()
