"""Reading a config: a JSON document on top of the profile it names (``load_config``), every
problem reported at once (``ConfigError.problems``) before any process starts; writing,
hashing and comparing one.

The rules a loaded config must keep live beside the structs they check (shared/config_schema.py,
each struct's ``problems()``); ``check_consistency`` asks for all of them.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import msgspec
from msgspec import Struct

from shared.config_profiles import PROFILES, default_profile_name, profile
from shared.config_schema import ConfigError, RunConfig
from shared.overlay import overlay


def check_consistency(cfg: RunConfig) -> list[str]:
    """Every cross-field rule a config breaks, all at once (``RunConfig.problems``), each naming
    its field; [] when it can run."""
    return cfg.problems(PROFILES)


def load_config(source: str | os.PathLike | dict | None = None, *, profile_name: str | None = None,
                overrides: dict | None = None) -> RunConfig:
    """Read a config: a path to a JSON file, a JSON string, or a decoded mapping.

    The document is applied on top of the profile it names (``"profile"``; else
    ``profile_name``; else ``default_profile_name()``), then ``overrides`` on top of that.
    Raises ConfigError listing every problem: unknown fields (with the closest valid name),
    wrong types, out-of-range numbers and cross-field rules.
    """
    problems: list[str] = []
    doc: Any = {}
    if source is not None:
        if isinstance(source, dict):
            doc = source
        else:
            text = str(source)
            if not text.lstrip().startswith("{"):
                try:
                    with open(text, "rb") as fh:
                        text = fh.read().decode()
                except OSError as exc:
                    raise ConfigError([f"config file {source}: {exc.strerror}"]) from None
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigError([f"config {source}: not valid JSON ({exc})"]) from None
    if not isinstance(doc, dict):
        raise ConfigError([f"config: expected a JSON object at the top, got {type(doc).__name__}"])
    # Not doc.get("profile", default_profile_name()): that would import torch (seconds) even
    # when the document names its profile.
    name = doc["profile"] if "profile" in doc else (profile_name or default_profile_name())
    if not isinstance(name, str) or name not in PROFILES:
        raise ConfigError([f"profile: unknown profile {name!r}; choose one of {', '.join(PROFILES)}"])
    from shared.extensions import split_sections

    doc, sections, section_problems = split_sections(doc, [f.encode_name for f in msgspec.structs.fields(RunConfig)])
    problems += section_problems
    merged = overlay(msgspec.to_builtins(PROFILES[name]()), doc, RunConfig, "", problems)
    if sections:
        merged["extensions"] = sections
    if overrides:
        merged = overlay(merged, overrides, RunConfig, "", problems)
    if problems:
        raise ConfigError(problems)
    cfg = msgspec.convert(merged, RunConfig)
    problems = check_consistency(cfg)
    if problems:
        raise ConfigError(problems)
    return cfg


def dump_config(cfg: RunConfig) -> bytes:
    """Canonical JSON of a config: fields in declaration order, two-space indent."""
    return msgspec.json.format(msgspec.json.encode(cfg), indent=2) + b"\n"


def config_hash(cfg: RunConfig) -> str:
    """sha256 of the canonical JSON."""
    return hashlib.sha256(msgspec.json.encode(cfg)).hexdigest()


def config_differences(before: Any, after: Any, path: str = "") -> dict[str, tuple[Any, Any]]:
    """Every leaf in which two configs (structs or builtins) differ, keyed by dotted path."""
    a = msgspec.to_builtins(before) if isinstance(before, Struct) else before
    b = msgspec.to_builtins(after) if isinstance(after, Struct) else after
    if isinstance(a, dict) and isinstance(b, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for key in list(a) + [k for k in b if k not in a]:
            out.update(config_differences(a.get(key), b.get(key), f"{path}.{key}" if path else key))
        return out
    return {} if a == b else {path: (a, b)}


def load_service_config(path: str | None) -> RunConfig:
    """The run config a CPU-only service (ladder, evaluator) reads: the JSON at ``path`` on the
    ``cpu`` profile when it names none, else the ``cpu`` profile itself. Not ``load_config``'s
    default profile, which imports torch only to look for a GPU; those services read sections
    no shipped profile changes. Raises ``ConfigError`` as ``load_config`` does."""
    return load_config(path, profile_name="cpu") if path else profile("cpu")
