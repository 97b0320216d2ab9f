"""Config sections that installed packages provide (entry point group ``royalefleet.extensions``).

A package declares a section in its metadata::

    [project.entry-points."royalefleet.extensions"]
    mybot_curiosity = "mybot.config:CuriositySection"

The entry point's NAME is the section's key, and what it loads is a msgspec ``Struct`` class
(its fields the section's settings, every one with a default, so ``Schema()`` is the section
at its defaults). A config document then has one more
top-level key, ``"mybot_curiosity": {...}``; ``load_config`` validates it against that class and
keeps it under ``RunConfig.extensions`` (and ``dump_config`` writes it there, so a stored config
reloads as it was). A top-level key that neither RoyaleFleet nor any installed package owns is
refused by name, with the sections that are installed. A section that is null counts as absent.

Each section the run uses is in the identity (``extension_records``): its digest by value, and
the distribution and version of the package that provides it, so the same settings read by
another release of the package are another run.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
from typing import Any, NamedTuple

import msgspec

from shared.overlay import overlay

GROUP = "royalefleet.extensions"

FIRST_PARTY: dict[str, str] = {
    "imitation": "services.learner.extensions.imitation:ImitationSection",
    "warm_start": "services.learner.extensions.warm_start:WarmStartSection",
}
"""RoyaleFleet's own sections, provided as an installed package's would be (distribution
``royalefleet``), loaded when used: the warm start and the KL anchor (issue 27)."""


class Provider(NamedTuple):
    """One installed section: its key, its schema and the package that declares it."""

    section: str
    schema: type
    distribution: str
    version: str


def providers() -> dict[str, list[Provider]]:
    """Every section installed packages declare, by key (a list: two packages may clash).
    An entry point that does not load, or loads something other than a msgspec Struct class, is
    skipped here and reported by ``split_sections`` when its section is used."""
    out: dict[str, list[Provider]] = {}
    for section, target in FIRST_PARTY.items():
        out[section] = [Provider(section, target, "royalefleet", _own_version())]
    for ep in importlib.metadata.entry_points(group=GROUP):
        dist = ep.dist
        out.setdefault(ep.name, []).append(Provider(ep.name, ep, dist.name if dist else "unknown",
                                                    dist.version if dist else "unknown"))
    return out


def _own_version() -> str:
    try:
        return importlib.metadata.version("royalefleet")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _schema(provider: Provider):
    ep = provider.schema
    if isinstance(ep, str):  # a first-party "module:Class"
        module, _, name = ep.partition(":")
        return getattr(importlib.import_module(module), name)
    if not isinstance(ep, importlib.metadata.EntryPoint):
        return ep
    obj = ep.load()
    if not (isinstance(obj, type) and issubclass(obj, msgspec.Struct)):
        raise TypeError(f"entry point {ep.value!r} of {provider.distribution} is a {type(obj).__name__}, "
                        "not a msgspec Struct class")
    return obj


def provider_for(section: str) -> Provider:
    """The one package providing ``section``; KeyError/ValueError with a message otherwise."""
    found = providers().get(section, [])
    if not found:
        raise KeyError(section)
    if len(found) > 1:
        raise ValueError(f"{section}: provided by {len(found)} installed packages "
                         f"({', '.join(f'{p.distribution} {p.version}' for p in found)}); uninstall all but one")
    return found[0]


def section_schema(section: str) -> type:
    """The msgspec Struct class of an installed section (KeyError/ValueError as ``provider_for``)."""
    return _schema(provider_for(section))


def split_sections(doc: dict, own: list[str]) -> tuple[dict, dict[str, Any], list[str]]:
    """``doc`` without its extension sections, the sections validated (key -> builtins), and
    every problem: a key no installed package provides (named, with close matches among
    RoyaleFleet's fields and the installed sections), a section two packages provide, a section
    whose value its schema refuses (the field inside named). ``own`` are RunConfig's keys."""
    rest = {k: v for k, v in doc.items() if k in own and k != "extensions"}
    candidates = {k: v for k, v in doc.items() if k not in own}
    stored = doc.get("extensions") or {}
    problems: list[str] = []
    if not isinstance(stored, dict):
        return rest, {}, [f"extensions: expected an object of sections, got {type(stored).__name__}"]
    candidates = {**stored, **candidates}
    if not candidates:
        return rest, {}, []
    installed = providers()
    sections: dict[str, Any] = {}
    for key, value in candidates.items():
        if value is None:
            continue
        if key not in installed:
            hint = difflib.get_close_matches(str(key), own + list(installed), n=1)
            problems.append(
                f"{key}: unknown field, and no installed package provides a section {key!r} "
                f"(entry point group {GROUP}; installed sections: {', '.join(sorted(installed)) or 'none'})"
                + (f"; did you mean {hint[0]!r}?" if hint else ""))
            continue
        try:
            provider = provider_for(key)
            schema = _schema(provider)
            base = msgspec.to_builtins(schema())
        except (ValueError, TypeError, ImportError, AttributeError) as exc:
            problems.append(f"{key}: {exc}")
            continue
        found: list[str] = []
        merged = overlay(base, value, schema, key, found)  # every leaf checked on its own, as ours are
        if not found:
            try:
                sections[key] = msgspec.to_builtins(msgspec.convert(merged, schema))
            except msgspec.ValidationError as exc:
                found.append(f"{key}: {exc}")
        problems += [f"{p} (section provided by {provider.distribution} {provider.version})" for p in found]
    return rest, sections, problems


class ExtensionRecord(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """One extension section in a run's identity: what it says and whose code reads it.
    ``digest`` is sha256 (16 hex) of the section's canonical JSON; ``distribution`` and
    ``version`` name the installed package that provides it."""

    section: str
    digest: str
    distribution: str
    version: str


def extension_records(sections: dict[str, Any]) -> list[ExtensionRecord] | None:
    """The identity's record of every section the run uses, sorted by key; None for none.
    Raises ValueError when a used section's provider is no longer installed (a run cannot say
    what it is without the code that reads its settings)."""
    if not sections:
        return None
    out = []
    for key in sorted(sections):
        try:
            p = provider_for(key)
        except KeyError:
            raise ValueError(f"{key}: the config uses this extension section, and no installed package provides it "
                             f"(entry point group {GROUP}); install its package") from None
        digest = hashlib.sha256(msgspec.json.encode(sections[key], order="sorted")).hexdigest()[:16]
        out.append(ExtensionRecord(section=key, digest=digest, distribution=p.distribution, version=p.version))
    return out
