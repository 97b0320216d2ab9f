"""Environment components named by dotted path: resolved, checked and recorded one way.

A component is ``{"cls": "mybot.rewards.MyReward", "kwargs": {...}}`` (``ComponentSpec``):
the reward, the observation builder, the action parser, the deck curriculum's class, and the
start and end curricula (``env.state_mutator``, ``env.done_condition``; shared/curricula.py). The
learner, every rollout and every evaluator build their battles through ``shared.envs.build_env``,
which resolves components here and only here, so the three cannot disagree about what a path
means.

Where a class may live: in ``royalegym`` or ``shared`` (what this repository and the engine
ship: there only a RoyaleGym component class, or a factory in ``SHIPPED_FACTORIES``), or in a
module that the config lists in ``env.extra_component_modules`` AND that this machine allows
(``local_modules``; a listed module also covers its submodules). Anything else is refused at
load, naming the field, before anything is imported.

Data never names code: the machine's allow-list comes from the local install and the local
settings only: ``ROYALEFLEET_ALLOW_MODULES`` (comma-separated; the CLI's ``--allow-module``
adds to it), ``ROYALEFLEET_USER_PACKAGES`` (what a rollout digests for its Hello, set by
whoever runs it), the top-level packages of installed extensions (entry point group
``royalefleet.extensions``) and ``allow_locally`` (what ``load_bot(trust_code=True)`` and
``--trust-code`` call for the folder the user chose to trust). A config, a bot folder, a run
folder or a message may only NARROW it: ``env.extra_component_modules`` declares what a config
needs, and a module it declares that the machine does not allow is refused by name with how to
allow it (``check_declared``). ``resolve`` is the one function in the tree that turns data into
an import (tests/shared/test_import_sites.py greps for any other).

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


SHIPPED_FACTORIES = ("shared.rewards.default_potential_reward",)
"""The functions of the shipped packages a config may name as a component. Anything else a
shipped package defines is a component only if it is a class of RoyaleGym's component kinds
(``_component_bases``): a config may not call ``shared.durable.replace_file`` with its kwargs."""

ALLOW_ENV = "ROYALEFLEET_ALLOW_MODULES"
"""The local setting naming (comma-separated) the user's installed modules a config may use."""

_LOCAL: set[str] = set()
_TRUST = [False]


class ComponentError(ValueError):
    """A component that cannot be resolved or built; the message names the field."""


def _under(module: str, roots) -> bool:
    return any(module == m or module.startswith(m + ".") for m in roots)


def _names(text: str) -> set[str]:
    return {s.strip() for s in text.split(",") if s.strip()}


def allow_locally(modules) -> None:
    """Allow ``modules`` (dotted names) for the rest of this process, and for the processes it
    starts (``ALLOW_ENV``): the local decision ``--allow-module`` and ``trust_code`` make.
    Raises ComponentError for a name that is not a dotted Python identifier."""
    bad = [m for m in modules if not isinstance(m, str) or not all(p.isidentifier() for p in m.split("."))]
    if bad:
        raise ComponentError(f"allow: {bad} are not module names such as 'mybot' or 'mybot.rewards'")
    _LOCAL.update(modules)
    if _LOCAL:
        os.environ[ALLOW_ENV] = ",".join(sorted(_LOCAL | _names(os.environ.get(ALLOW_ENV, ""))))


def trust_declared(on: bool = True) -> None:
    """From now on, in this process, a config's own ``env.extra_component_modules`` counts as
    allowed: the CLI's ``--trust-code``, the user's explicit word that the run folder the
    command reads is theirs or trusted. Off by default; nothing read from data turns it on."""
    _TRUST[0] = bool(on)


def trusting() -> bool:
    """Whether ``trust_declared`` is on in this process."""
    return _TRUST[0]


def extension_packages() -> set[str]:
    """The top-level packages of the installed extensions (entry point group
    ``royalefleet.extensions``): installed on this machine, so local."""
    import importlib.metadata

    return {ep.value.split(":")[0].split(".")[0] for ep in importlib.metadata.entry_points(group="royalefleet.extensions")}


def explicit_modules(environ=None) -> list[str]:
    """The modules this process was told to allow: ``ALLOW_ENV`` and ``allow_locally``. Sorted."""
    environ = os.environ if environ is None else environ
    return sorted(_names(environ.get(ALLOW_ENV, "")) | _LOCAL)


def local_modules(environ=None) -> list[str]:
    """This machine's allow-list (module docstring), sorted; never read from a config."""
    environ = os.environ if environ is None else environ
    names = _names(environ.get(ALLOW_ENV, "")) | _names(environ.get(USER_PACKAGES_ENV, "")) | _LOCAL
    return sorted(names | extension_packages())


def allow_hint(modules) -> str:
    """How to allow ``modules`` on this machine, for an error message."""
    tops = ",".join(sorted({m.split(".")[0] for m in modules}))
    return (f"if you trust that code, allow it here: {ALLOW_ENV}={tops} (or --allow-module {tops}), or for a bot or "
            "run folder you trust, load_bot(..., trust_code=True) / --trust-code")


def foreign_modules(declared, environ=None) -> list[str]:
    """The modules of ``declared`` (a config's ``env.extra_component_modules``) this machine does
    not allow: neither shipped nor under ``local_modules``. Sorted; [] when all are allowed."""
    if _TRUST[0]:
        return []
    local = local_modules(environ)
    # a forbidden package is refused by resolve, naming why, and never imported
    known = SHIPPED_PACKAGES + FORBIDDEN_PACKAGES
    return sorted(m for m in declared if not (str(m).split(".")[0] in known or _under(str(m), local)))


def named_modules(env) -> list[str]:
    """Every module an EnvConfig's components name: each ``cls`` path's module (nested parts in
    kwargs too, e.g. a WeightedStateMutator's ``mutators``) and ``env.extra_component_modules``.
    Sorted, without duplicates."""
    out = set(env.extra_component_modules)
    for spec in env_components(env).values():
        out.update(p.rpartition(".")[0] or p for p in [spec.cls, *_cls_paths(spec.kwargs)] if isinstance(p, str))
    return sorted(out)


def _cls_paths(value) -> list:
    if isinstance(value, dict):
        return [*([value["cls"]] if "cls" in value else []), *(p for v in value.values() for p in _cls_paths(v))]
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in _cls_paths(v)]
    return []


def foreign_code(env, environ=None) -> list[str]:
    """The modules ``env`` (an EnvConfig that came from a peer, e.g. a Welcome) names that THIS
    machine does not allow, judged by its own list only (``env.extra_component_modules`` allows
    nothing here; a forbidden package counts as foreign). Sorted; [] when it names only allowed
    code. Imports nothing."""
    local = local_modules(environ)
    return [m for m in named_modules(env)
            if m.split(".")[0] in FORBIDDEN_PACKAGES or not (m.split(".")[0] in SHIPPED_PACKAGES or _under(m, local))]


def check_declared(doc, source: str, trust: bool = False) -> None:
    """Refuse the config document ``doc`` (a dict, as read from ``source``'s config.json) when
    its ``env.extra_component_modules`` names a module this machine does not allow: before
    anything is imported, naming the modules and how to allow them. ``trust`` (the user's
    explicit ``trust_code``) allows them locally instead. Raises ComponentError."""
    env = doc.get("env") if isinstance(doc, dict) else None
    declared = env.get("extra_component_modules") if isinstance(env, dict) else None
    if not declared:
        return
    if not isinstance(declared, list) or not all(isinstance(m, str) for m in declared):
        raise ComponentError(f"{source}: env.extra_component_modules is {declared!r}, not a list of module names")
    if trust:
        allow_locally(declared)
        return
    foreign = foreign_modules(declared)
    if foreign:
        raise ComponentError(f"{source} names code of modules {foreign} (env.extra_component_modules), which this "
                             f"machine does not allow: a folder's config never decides what is imported; "
                             + allow_hint(foreign))


def _allowed(module: str, extra: tuple[str, ...] | list[str]) -> bool:
    top = module.split(".")[0]
    if top in FORBIDDEN_PACKAGES:
        return False
    if top in SHIPPED_PACKAGES:
        return True
    return _under(module, extra) and (_TRUST[0] or _under(module, local_modules()))


def _component_bases() -> tuple[type, ...]:
    from royalegym.action import ActionParser
    from royalegym.done_condition import DoneCondition
    from royalegym.obs import ObsBuilder
    from royalegym.reward import RewardFunction
    from royalegym.state_mutator import StateMutator

    return (RewardFunction, ObsBuilder, ActionParser, StateMutator, DoneCondition)


def _home_problem(path: str, obj, extra) -> str | None:
    """Why ``obj`` (what ``path`` resolved to) may not be built from a config, or None: it must
    be defined in an allowed module (not re-exported from elsewhere, e.g. ``os.system`` imported
    into an allowed module), and a shipped one must be a component class or a shipped factory."""
    home = getattr(obj, "__module__", None) or type(obj).__module__
    if not isinstance(home, str) or not _allowed(home, extra):
        return f"{path!r} is defined in {home!r}, a module not allowed here; name the class where it is defined"
    if home.split(".")[0] in SHIPPED_PACKAGES:
        shipped = f"{home}.{getattr(obj, '__qualname__', '')}"
        if not (isinstance(obj, type) and issubclass(obj, _component_bases())) and shipped not in SHIPPED_FACTORIES:
            return (f"{path!r} is no component: from royalegym and shared a config may name a RoyaleGym reward, "
                    f"observation builder, action parser, state mutator or done condition class, or {list(SHIPPED_FACTORIES)}")
    return None


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
        if _under(module, extra):
            raise ComponentError(f"{field}.cls: module {module!r} is listed in env.extra_component_modules but not "
                                 f"allowed on this machine (allowed: {local_modules()}); a config never decides "
                                 "what is imported: " + allow_hint([module]))
        raise ComponentError(f"{field}.cls: module {module!r} is not listed in env.extra_component_modules "
                             f"(listed: {list(extra)}); add {module.split('.')[0]!r} there to allow it "
                             f"(and allow it on this machine: {ALLOW_ENV} or --allow-module)")
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
    home = _home_problem(path, obj, extra)
    if home:
        raise ComponentError(f"{field}.cls: {home}")
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
