"""One way for every service to turn flags, ``ROYALEFLEET_*`` environment variables and defaults
into its settings, in that order of precedence (the flag wins), so ``royalefleet up`` on
loopback and Compose share one code path.

A service declares its settings once, as a dataclass whose fields are ``option(...)``s::

    @dataclass(frozen=True)
    class Settings:
        bind: str = option("tcp://127.0.0.1:5556", env="ROYALEFLEET_LADDER_BIND",
                           help="ZeroMQ address the ROUTER binds")
        metrics_port: int = option(9101, env="ROYALEFLEET_METRICS_PORT", parse=port,
                                   help="Prometheus /metrics port; 0 turns it off")

and ``parse_settings(Settings, argv, prog=..., description=...)`` builds the argparse parser
(``--bind``, ``--metrics-port``: the field name with dashes), whose ``--help`` shows every
option's help, variable and default. A bool field is a switch (``--clear-halt``) whose variable
is on unless it is empty or ``0``. A value that does not parse exits with status 2 naming the
flag or the variable, the value and why.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Option:
    """What ``option`` records on a field: its variable, its help, its parser and its flag."""

    env: str
    help: str
    parse: Callable[[str], Any] | None = None
    flag: str | None = None
    default_text: str | None = None


def option(default: Any, *, env: str, help: str, parse: Callable[[str], Any] | None = None,
           flag: str | None = None, default_text: str | None = None) -> Any:
    """A settings field: ``default`` (used when neither the flag nor ``env`` is given), the
    environment variable ``env``, the ``help`` shown by ``--help``; ``parse`` turns a string
    into the value and raises ValueError with the reason (default: by the field's type);
    ``flag`` overrides ``--field-name``; ``default_text`` is shown instead of the default."""
    return dataclasses.field(default=default, metadata={"option": Option(env, help, parse, flag, default_text)})


def whole(text: str) -> int:
    """An int from ``text``. Raises ValueError ``not a whole number``."""
    try:
        return int(text)
    except ValueError:
        raise ValueError("not a whole number") from None


def positive(text: str) -> int:
    """A whole number >= 1. Raises ValueError naming the value."""
    value = whole(text)
    if value < 1:
        raise ValueError(f"{value} is not >= 1")
    return value


def port(text: str) -> int:
    """A TCP port, 0..65535 (0 turns the listener off). Raises ValueError naming the value."""
    value = whole(text)
    if not 0 <= value <= 65535:
        raise ValueError(f"{value} is not a port (0..65535)")
    return value


def port_or_config(text: str) -> int:
    """A port, or -1 for "the config's port". Raises ValueError naming the value."""
    value = whole(text)
    return value if value == -1 else port(text)


def switch(text: str) -> bool:
    """A switch's variable: off when empty or ``0``, on otherwise."""
    return text not in ("", "0")


def _text(text: str) -> str:
    return text


_BY_TYPE: dict[Any, Callable[[str], Any]] = {int: whole, "int": whole, bool: switch, "bool": switch}


def options(cls) -> list[tuple[dataclasses.Field, Option]]:
    """The fields of a settings dataclass with their ``Option``, in declaration order."""
    out = []
    for f in dataclasses.fields(cls):
        opt = f.metadata.get("option")
        if opt is None:
            raise TypeError(f"{cls.__name__}.{f.name} is not an option(...): every setting needs its env and help")
        out.append((f, opt))
    return out


def _flag(f: dataclasses.Field, opt: Option) -> str:
    return opt.flag or "--" + f.name.replace("_", "-")


def _is_switch(f: dataclasses.Field) -> bool:
    return f.type in (bool, "bool")


def _parser_of(f: dataclasses.Field, opt: Option) -> Callable[[str], Any]:
    return opt.parse or _BY_TYPE.get(f.type, _text)


def build_parser(cls, *, prog: str, description: str) -> argparse.ArgumentParser:
    """The argparse parser of settings class ``cls`` (every flag defaults to None: unset)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description,
        epilog="Each flag falls back to its environment variable, then to the default shown.",
    )
    for f, opt in options(cls):
        shown = opt.default_text if opt.default_text is not None else ("none" if f.default is None else f.default)
        if _is_switch(f):
            parser.add_argument(_flag(f, opt), dest=f.name, action="store_true", default=None,
                                help=f"{opt.help} [env {opt.env}=1; default off]")
            continue
        parse = _parser_of(f, opt)
        flag = _flag(f, opt)

        def convert(text: str, parse=parse):
            try:
                return parse(text)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None

        convert.__name__ = flag
        parser.add_argument(flag, dest=f.name, type=convert, default=None,
                            help=f"{opt.help} [env {opt.env}; default {shown}]")
    return parser


METRICS_PORT_HELP = "Prometheus /metrics port; 0 turns it off"
METRICS_HOST_HELP = "address the /metrics server listens on"


def metrics_port_option(default: int, *, parse: Callable[[str], Any] = port, default_text: str | None = None,
                        help: str = METRICS_PORT_HELP) -> Any:
    """Every service's ``--metrics-port`` (``ROYALEFLEET_METRICS_PORT``), ``default`` its own
    port, parsed by ``port`` unless ``parse`` says otherwise (the learner's -1: the config's)."""
    return option(default, env="ROYALEFLEET_METRICS_PORT", parse=parse, default_text=default_text, help=help)


def metrics_host_option(*, help: str = METRICS_HOST_HELP) -> Any:
    """Every service's ``--metrics-host`` (``ROYALEFLEET_METRICS_HOST``), loopback by default."""
    return option("127.0.0.1", env="ROYALEFLEET_METRICS_HOST", help=help)


def settings_parser(cls: type[T], *, prog: str, description: str) -> Callable[..., T]:
    """A service's ``parse_settings(argv=None, environ=None) -> cls``: ``parse_settings`` below
    with this ``prog`` (what ``--help`` calls the command) and ``description``."""

    def parse(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> T:
        return parse_settings(cls, argv, environ, prog=prog, description=description)

    parse.__doc__ = (f"The settings of {prog} from flags, else variables, else defaults; a bad value exits 2 "
                     "naming the flag or the variable.")
    return parse


def parse_settings(cls: type[T], argv: list[str] | None = None, environ: Mapping[str, str] | None = None, *,
                   prog: str, description: str) -> T:
    """An instance of settings class ``cls`` from ``argv`` (default ``sys.argv[1:]``), else
    ``environ`` (default ``os.environ``), else each field's default. ``--help`` prints every
    option and exits 0; a bad value exits 2 (argparse's usage error) naming the flag or the
    variable. Raises TypeError for a field that is not an ``option``."""
    environ = os.environ if environ is None else environ
    parser = build_parser(cls, prog=prog, description=description)
    args = parser.parse_args(argv)
    values = {}
    for f, opt in options(cls):
        value = getattr(args, f.name)
        if value is None and opt.env in environ:
            try:
                value = _parser_of(f, opt)(environ[opt.env])
            except ValueError as exc:
                parser.error(f"environment variable {opt.env}={environ[opt.env]!r}: {exc}")
        if value is not None:
            values[f.name] = value
    return cls(**values)
