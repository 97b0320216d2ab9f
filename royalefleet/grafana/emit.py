"""Files from documents: YAML through PyYAML, JSON through the standard library.

The YAML keeps the layout the files had when a hand-written emitter wrote them: block style,
no anchors, keys in insertion order, sequences indented under their key, a list of scalars (or an empty
mapping) on one line in flow style, no line folding. Quoting is PyYAML's: a string is plain
only where a YAML 1.1 reader (PyYAML, Go's yaml.v2) would read it back as that string.
"""

from __future__ import annotations

import json

import yaml

from royalefleet.grafana.common import HEADER


class _Dumper(yaml.SafeDumper):
    """SafeDumper that indents a block sequence under its mapping key (``key:\\n  - x``) and
    writes a value met twice in full both times (no ``&id001`` anchors: a reader should not
    have to resolve them, and promtool's expected alerts read better spelt out)."""

    def ignore_aliases(self, data) -> bool:
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        return super().increase_indent(flow, False)


def _flat(v) -> bool:
    """A scalar, an empty mapping, or a list of flat values: written on one line."""
    return not isinstance(v, (dict, list)) or v == {} or (isinstance(v, list) and all(map(_flat, v)))


def _sequence(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=_flat(data))


def _mapping(dumper: yaml.SafeDumper, data: dict) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=not data)


_Dumper.add_representer(list, _sequence)
_Dumper.add_representer(dict, _mapping)


def to_yaml(obj: dict, header: str = HEADER) -> str:
    """``obj`` as YAML, each line of ``header`` a ``#`` comment above it."""
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + yaml.dump(obj, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 30,
                               default_flow_style=False)


def to_json(obj: dict) -> str:
    return json.dumps(obj, indent=2) + "\n"
