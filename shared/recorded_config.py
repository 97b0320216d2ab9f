"""A run's own config: the ``config.json`` in its folder, and what a start's config changes in it.

Every start records the config it runs with in ``<runs_dir>/<run_name>/config.json``
(``royalefleet up`` before it starts the services; under Compose the learner, at its first
start). A later start takes that record as the run's config unless told otherwise, and sorts
what the new start would change into the changes that move the run identity (refused unless
the drift is allowed: shared/identity.py) and those that do not (accepted and shown).

``royalefleet up``/``resume`` read it through ``royalefleet.start_config``; the learner through
``for_learner``, so a Compose learner recreated without the ``.env`` that named its config file
resumes with the run's own identity instead of refusing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import msgspec

from shared.config import ConfigError, RunConfig, config_differences, dump_config, load_config
from shared.identity import config_identity, digest
from shared.run_dir import RunDir


def recorded_path(runs_dir: str | os.PathLike, run_name: str) -> Path:
    """``<runs_dir>/<run_name>/config.json``. Raises ValueError for an unusable run name."""
    return RunDir.of(runs_dir, run_name).config


WIRE_CODEC_BEFORE_ITS_FIELD = 1
"""The wire codec of a record written before ``services.wire_codec`` existed (every record
names every field, so one without it is that old): packed rows, codec 1."""


def recorded_doc(runs_dir: str | os.PathLike, run_name: str) -> dict | None:
    """The run's config.json as a document, None when it has none; a record written before a
    field whose default has changed since gets the value it ran with (``services.wire_codec``:
    1). Raises ConfigError naming the file for one that is not a JSON object."""
    path = recorded_path(runs_dir, run_name)
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError([f"the run's config {path}: {exc}"]) from None
    if not isinstance(doc, dict):
        raise ConfigError([f"the run's config {path}: expected a JSON object"])
    services = doc.get("services")
    if isinstance(services, dict) and "wire_codec" not in services:
        services["wire_codec"] = WIRE_CODEC_BEFORE_ITS_FIELD
    return doc


def load_recorded(runs_dir: str | os.PathLike, run_name: str) -> RunConfig | None:
    """The config the run recorded (``recorded_doc``), None when it has none. Raises
    ConfigError for a record that does not load."""
    doc = recorded_doc(runs_dir, run_name)
    return None if doc is None else load_config(doc)


def identity_key(cfg: RunConfig) -> dict[str, Any]:
    """The run-identity fields ``cfg`` alone decides (``config_identity``) and its extension
    sections by value: two configs with equal keys give one run id on one machine and build."""
    return config_identity(cfg) | {"extensions": digest(cfg.extensions)}


def _set(doc: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        doc = doc.setdefault(part, {})
    if value is None and parts[-1] not in doc:
        return
    doc[parts[-1]] = value


def identity_changes(before: RunConfig, after: RunConfig) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """The config fields in which ``after`` differs from ``before``, split in two: those that
    move the run identity (each alone, set on ``before``, changes ``identity_key``) and the
    rest, each ``dotted.path -> (before's value, after's value)``. When the identities differ
    and no single field explains it, every differing field counts as changing it."""
    diffs = config_differences(before, after)
    if identity_key(before) == identity_key(after):
        return {}, diffs
    base = msgspec.to_builtins(before)
    key = identity_key(before)
    moving: dict[str, tuple] = {}
    for path, pair in diffs.items():
        doc = json.loads(json.dumps(base))
        _set(doc, path, pair[1])
        try:
            moved = identity_key(msgspec.convert(doc, RunConfig)) != key
        except (msgspec.ValidationError, TypeError, ValueError):
            moved = True
        if moved:
            moving[path] = pair
    if not moving:
        moving = diffs
    return moving, {p: v for p, v in diffs.items() if p not in moving}


def identity_fields_moved(before: RunConfig, after: RunConfig) -> list[str]:
    """The ``RunIdentity`` fields (``codec_version``, ``algo_digest``, ...) that differ."""
    a, b = identity_key(before), identity_key(after)
    return [k for k in a if a[k] != b[k]]


def write_recorded(path: str | os.PathLike, cfg: RunConfig) -> None:
    """Write ``cfg`` as the run's record (atomically: a torn record would be refused at load).
    Raises OSError."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(dump_config(cfg))
    os.replace(tmp, path)


def for_learner(cfg: RunConfig, runs_dir: str, *, allow_identity_drift: bool,
                say: Callable[[str], None]) -> RunConfig:
    """The config the learner runs with: ``cfg`` (its ``ROYALEFLEET_CONFIG``) on a run with no
    record (which it then records), or with the run's identity fields taken from the record
    when ``cfg`` would change them and ``allow_identity_drift`` is off (said, field by field).
    Fields outside the identity (addresses, ports, timeouts, alarms) always come from ``cfg``.
    With ``allow_identity_drift`` the record becomes ``cfg``. Raises ConfigError for a record
    that does not load."""
    path = recorded_path(runs_dir, cfg.run_name)
    recorded = load_recorded(runs_dir, cfg.run_name)
    if recorded is None:
        _record(path, cfg, say)
        return cfg
    moving, _ = identity_changes(recorded, cfg)
    if moving and not allow_identity_drift:
        doc = msgspec.to_builtins(cfg)
        for p, (was, _now) in moving.items():
            _set(doc, p, was)
        kept = load_config(doc)
        if identity_key(kept) != identity_key(recorded):
            kept = recorded
        lines = [f"  {p}: the run's {was!r}, the given config's {now!r}" for p, (was, now) in moving.items()]
        say(f"learner: run {cfg.run_name!r} resumes with its own config ({path}) where the given config would "
            f"change its run identity:\n" + "\n".join(lines)
            + "\nTo run with the given config instead, allow the drift for one start (ROYALEFLEET_ALLOW_IDENTITY_DRIFT=1;"
            " Compose: FLEET_ALLOW_IDENTITY_DRIFT=1 docker compose up -d learner) or start another run_name.")
        return kept
    if config_differences(recorded, cfg):
        _record(path, cfg, say)
    return cfg


def _record(path: Path, cfg: RunConfig, say) -> None:
    try:
        write_recorded(path, cfg)
    except OSError as exc:  # the run goes on; only a later start's comparison is lost
        say(f"learner: could not record the run's config in {path} ({exc.strerror or exc}); a later start "
            "cannot compare its config with this one")
