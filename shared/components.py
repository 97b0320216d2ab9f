"""Environment components named by dotted path: resolved, checked and recorded one way.

A component is ``{"cls": "mybot.rewards.MyReward", "kwargs": {...}}`` (``ComponentSpec``):
the reward, the observation builder, the action parser, the deck curriculum's class, and the
start and end curricula (``env.state_mutator``, ``env.done_condition``; shared/curricula.py). The
learner, every rollout and every evaluator build their battles through ``shared.envs.build_env``,
which resolves components here and only here, so the three cannot disagree about what a path
means.

Where a class may live: in ``royalegym`` or ``shared`` (what this repository and the engine
ship), or in a module listed in ``env.extra_component_modules`` (the allow-list; a listed
module also covers its submodules). Anything else is refused at load, naming the field.

What is checked at load (``component_problems``), so a config is refused for what the component
would refuse at build: the module is allowed and imports, the attribute exists and is callable,
the kwargs bind to its signature, and whatever the component itself says is wrong with its
kwargs: a component may define ``config_problems(kwargs: dict) -> list[str]`` (a static method,
or an attribute of a function), which ``shared.rewards.default_potential_reward`` does with
``shaping_weight_problems`` (a weight that is NaN, negative, a bool or a string).

``user_code(env)`` is the identity's record of the user's own code: ``{top-level package:
sha256 of its source}``, for every component class that lives outside this repository and
RoyaleGym, so an edit to ``mybot/rewards.py`` (or to ``mybot/util.py``, which it imports) is a
different run.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
from pathlib import Path
from typing import Any

SHIPPED_PACKAGES = ("royalegym", "shared")
"""Top-level packages a component may come from without being listed: the engine's and ours.
Neither is user code: RoyaleGym is named by the engine build, ``shared`` by this build."""

FORBIDDEN_PACKAGES = ("services", "royalefleet")
"""Never a component's home: a service's own code, and the CLI."""


class ComponentError(ValueError):
    """A component that cannot be resolved or built; the message names the field."""


def _allowed(module: str, extra: tuple[str, ...] | list[str]) -> bool:
    top = module.split(".")[0]
    if top in FORBIDDEN_PACKAGES:
        return False
    if top in SHIPPED_PACKAGES:
        return True
    return any(module == m or module.startswith(m + ".") for m in extra)


def resolve(path: str, extra: tuple[str, ...] | list[str], field: str):
    """The object ``path`` (``package.module.Name``) names. Raises ComponentError naming
    ``field`` for a path with no module, a module not allowed (neither shipped nor under
    ``extra``), a module that does not import, or a name the module does not define."""
    if not isinstance(path, str) or "." not in path:
        raise ComponentError(f"{field}.cls: {path!r} is not a dotted path such as 'mybot.rewards.MyReward'")
    module, _, name = path.rpartition(".")
    if not _allowed(module, extra):
        if module.split(".")[0] in FORBIDDEN_PACKAGES:
            raise ComponentError(f"{field}.cls: {path!r} lives in {module.split('.')[0]!r}, which holds services "
                                 "and the CLI, never a component")
        raise ComponentError(f"{field}.cls: module {module!r} is not listed in env.extra_component_modules "
                             f"(listed: {list(extra)}); add {module.split('.')[0]!r} there to allow it")
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's import error, reported by field
        raise ComponentError(f"{field}.cls: module {module!r} does not import ({type(exc).__name__}: {exc}); "
                             "is its package installed or on PYTHONPATH?") from None
    if not hasattr(mod, name):
        public = sorted(n for n in vars(mod) if not n.startswith("_") and callable(getattr(mod, n)))[:12]
        raise ComponentError(f"{field}.cls: module {module!r} has no {name!r} (it defines {public})")
    obj = getattr(mod, name)
    if not callable(obj):
        raise ComponentError(f"{field}.cls: {path!r} is a {type(obj).__name__}, not a class or function")
    return obj


def problems(spec, extra, field: str) -> list[str]:
    """Everything wrong with one component spec (``cls``/``kwargs``), each naming ``field``."""
    try:
        obj = resolve(spec.cls, extra, field)
    except ComponentError as exc:
        return [str(exc)]
    out = []
    try:
        inspect.signature(obj).bind(**spec.kwargs)
    except TypeError as exc:
        out.append(f"{field}.kwargs: {sorted(spec.kwargs)} do not fit {spec.cls}: {exc}")
    except ValueError:  # a builtin without a signature: nothing to check here
        pass
    checker = getattr(obj, "config_problems", None)
    if callable(checker) and not out:
        out += [f"{field}.kwargs: {p}" for p in checker(dict(spec.kwargs))]
    return out


def build(spec, extra, field: str, **fixed):
    """``cls(**kwargs, **fixed)``; ComponentError naming ``field`` for what it refuses."""
    obj = resolve(spec.cls, extra, field)
    clash = sorted(set(fixed) & set(spec.kwargs))
    if clash:
        raise ComponentError(f"{field}.kwargs: {clash} are set by royalefleet itself; remove them")
    try:
        return obj(**spec.kwargs, **fixed)
    except (TypeError, ValueError) as exc:
        raise ComponentError(f"{field}: {spec.cls}(**{dict(spec.kwargs)}) refused: {exc}") from None


# ----------------------------------------------------------------------------- user code


def env_components(env) -> dict[str, Any]:
    """Every component spec an EnvConfig names, by field: ``{"env.reward_fn": spec, ...}``."""
    out = {}
    for name in ("reward_fn", "obs_builder", "action_parser", "state_mutator", "done_condition"):
        spec = getattr(env, name, None)
        if spec is not None:
            out[f"env.{name}"] = spec
    decks = getattr(env, "seat_decks", None)
    if decks is not None:
        out["env.seat_decks"] = decks
    return out


def user_packages(env) -> list[str]:
    """The top-level packages of the user's own code this env's components come from: each
    component class outside the shipped packages, and any string in a component's kwargs that
    names a module under ``env.extra_component_modules`` (how a composition names its parts).
    A module merely LISTED is not counted: listing cannot move a number. Sorted."""
    extra = tuple(env.extra_component_modules)
    tops = set()
    for spec in env_components(env).values():
        module = spec.cls.rpartition(".")[0]
        if module and module.split(".")[0] not in SHIPPED_PACKAGES:
            tops.add(module.split(".")[0])
        for v in _strings(spec.kwargs):
            if any(v == m or v.startswith(m + ".") for m in extra):
                tops.add(v.split(".")[0])
    return sorted(tops)


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def package_source(top: str) -> Path:
    """Where package (or single module) ``top`` is imported from: its folder, or its file.
    Raises ComponentError when it cannot be found."""
    spec = importlib.util.find_spec(top)
    if spec is None:
        raise ComponentError(f"user package {top!r} is not importable here; install it or put it on PYTHONPATH")
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    if spec.origin is None:
        raise ComponentError(f"user package {top!r} has no source file")
    return Path(spec.origin)


def package_digest(top: str) -> str:
    """sha256 (64 hex) over every ``.py`` file of package ``top``: each file's path relative to
    the package folder and its bytes, in sorted path order (so a moved checkout is the same
    digest, and an edit to any module, or a module added or removed, is another)."""
    root = package_source(top)
    h = hashlib.sha256()
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    for p in files:
        rel = p.name if root.is_file() else p.relative_to(root).as_posix()
        data = p.read_bytes()
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def user_code(env) -> dict[str, str]:
    """``{top-level package: package_digest}`` for ``user_packages(env)``; {} for none."""
    return {top: package_digest(top) for top in user_packages(env)}


USER_PACKAGES_ENV = "ROYALEFLEET_USER_PACKAGES"
"""The environment variable naming (comma-separated) the user packages a rollout digests for
its Hello. The launcher sets it from the config; under Compose it is set in the rollout's
environment (docs/compose.md). A rollout does not see the config before it is welcomed."""


def hello_user_code(environ=os.environ) -> dict[str, str]:
    """The rollout's Hello ``user_code``: the digest of each package ``USER_PACKAGES_ENV`` names,
    ``"missing"`` for one not importable here (the learner's refusal then names it)."""
    out = {}
    for top in filter(None, (s.strip() for s in environ.get(USER_PACKAGES_ENV, "").split(","))):
        try:
            out[top] = package_digest(top)
        except ComponentError:
            out[top] = "missing"
    return out


def user_code_refusal(learner: dict[str, str] | None, rollout: dict[str, str]) -> str | None:
    """Why a rollout's user code cannot join this learner (None when it can): every package of
    the learner's ``user_code`` whose digest the rollout's Hello does not match, with both."""
    if not learner:
        return None
    bad = [top for top in sorted(learner) if rollout.get(top) != learner[top]]
    if not bad:
        return None
    parts = [f"{top}: the learner's user_code is {learner[top][:16]}, the rollout's is "
             f"{(rollout.get(top) or 'not sent')[:16]}" for top in bad]
    return ("user code differs (" + "; ".join(parts) + "); install the learner's copy of "
            + ", ".join(bad) + f" on the rollout and set {USER_PACKAGES_ENV}={','.join(sorted(learner))}")
