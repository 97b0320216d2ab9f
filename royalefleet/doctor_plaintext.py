"""Doctor's word on plaintext (issue 38): where CURVE is off, whether anything would travel
unauthenticated beyond loopback, for ``royalefleet up`` (``plaintext_problem``: the config's
``services.host``) and for Compose (``compose_plaintext``: ``FLEET_CURVE_DIR``,
``FLEET_LEARNER_PUBLISH`` and ``FLEET_INSECURE_PLAINTEXT`` as Compose reads them, from the
environment over the project's ``.env``). The services themselves refuse such an address
(shared/transport.py ``plaintext_refusal``); doctor says so before anything starts."""

from __future__ import annotations

import os
from pathlib import Path

from shared import transport


def plaintext_problem(host: str, environ=None) -> tuple[str, str] | None:
    """(level, text) for CURVE off on ``host`` (the config's ``services.host``), or None when it
    stays on loopback without the insecure flag: "FAIL" when the services would refuse to bind
    it, "WARN" whenever ``ROYALEFLEET_INSECURE_PLAINTEXT=1`` is set (shown, chosen)."""
    if transport.insecure_plaintext(environ):
        where = "stay on loopback here" if transport.is_loopback(transport.tcp(host, 1)) else "serve PLAINTEXT to the network"
        return ("WARN", f"{transport.INSECURE_ENV}=1 with services.host {host}: the services may use plaintext beyond "
                f"loopback, unauthenticated, and {where} (royalefleet_insecure_plaintext 1)")
    if transport.is_loopback(transport.tcp(host, 1)):
        return None
    return ("FAIL", f"services.host {host} is not loopback and CURVE is off: the services will refuse to bind it "
            f"(set {transport.CURVE_DIR_ENV} to keys made by `royalefleet keys`, use 127.0.0.1, or accept plaintext "
            f"with {transport.INSECURE_ENV}=1)")


def compose_settings(root: Path, environ=None) -> dict[str, str]:
    """The variables Compose substitutes: the project's ``.env`` (KEY=VALUE lines), then the
    environment over it."""
    out: dict[str, str] = {}
    try:
        lines = (root / ".env").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        key, eq, value = line.strip().partition("=")
        if eq and key and not key.startswith("#"):
            out[key.strip()] = value.strip().strip("'\"")
    out.update(os.environ if environ is None else environ)
    return out


def compose_plaintext(settings: dict[str, str]) -> tuple[str, str]:
    """(level, text) of compose.yaml's transport under ``settings``: CURVE on (``FLEET_CURVE_DIR``
    unset: /keys) is OK; CURVE off (``FLEET_CURVE_DIR=``) FAILs when the learner's port is
    published beyond loopback (``FLEET_LEARNER_PUBLISH``) or when ``FLEET_INSECURE_PLAINTEXT``
    is not 1 (the containers would refuse each other), and WARNs otherwise."""
    curve = settings.get("FLEET_CURVE_DIR", "/keys")
    if curve:
        return ("OK", f"CURVE on ({curve})")
    publish = settings.get("FLEET_LEARNER_PUBLISH") or "127.0.0.1:5555"
    host = publish.rpartition(":")[0] if ":" in publish else "0.0.0.0"  # a bare port publishes on every address
    if not transport.is_loopback(transport.tcp(host or "0.0.0.0", 1)):
        return ("FAIL", f"CURVE is off (FLEET_CURVE_DIR=) and the learner's port is published on {publish} "
                "(FLEET_LEARNER_PUBLISH): plaintext training traffic, and saves, open to the network; unset "
                "FLEET_CURVE_DIR (CURVE is on by default) or publish on 127.0.0.1")
    if not transport.insecure_plaintext({transport.INSECURE_ENV: settings.get("FLEET_INSECURE_PLAINTEXT", "")}):
        return ("FAIL", "CURVE is off (FLEET_CURVE_DIR=): the containers talk over the Compose network, not loopback, "
                "so each service will refuse to start; unset FLEET_CURVE_DIR, or set FLEET_INSECURE_PLAINTEXT=1 "
                "(and FLEET_CHECKPOINT_TOKEN) to accept plaintext between containers")
    return ("WARN", "CURVE is off and FLEET_INSECURE_PLAINTEXT=1: plaintext between containers (the learner's port "
            f"published on {publish} only)")
