"""Role tokens: only the run's learner writes its checkpoints and the ladder's records, and only
an evaluator reports evaluation games. One place for every token (derivation, the stamp a client
puts on its writes, the server's check).

The checkpoint service refuses a ``SaveCheckpoint`` or ``SaveSnapshot`` whose ``token`` is not
the one it was started with (``unauthorized``, counted), before it touches the disk: a refused
save writes nothing, creates no run folder and prunes nothing. Loads stay open.

The ladder refuses a write (``LADDER_WRITES``: a report of episodes, a pool candidate, a strength
snapshot from the learner; a job request or an evaluation report from an evaluator) whose
``token`` is not that role's (``unauthorized``, counted), before anything is filed: a rollout,
which holds neither token, cannot report games or pick the champion. Plans and the status stay
open (they change nothing).

Where a token comes from, the same rule in every process:

1. The role's variable when set (``TOKEN_ENV``, ``LADDER_TOKEN_ENVS``). ``royalefleet up``
   (``make run``) draws fresh random ones per start and gives each to exactly the processes
   that hold that role or check it.
2. Else, with CURVE on (``ROYALEFLEET_CURVE_DIR``, as under Compose and Kubernetes): derived
   from the servers' secret key (``server.key_secret``, present only where the servers run), so
   no extra secret is needed; a process without that key (an evaluator) reads its token from
   ``<keys folder>/<token_file(role)>``, which ``royalefleet keys`` writes into that role's keys
   only. A rollout holds neither, and cannot compute any.
3. Else none. The checkpoint writer token is never empty: ``checkpoint_token`` raises, and
   neither the learner nor the checkpoint service starts (issue 38: with CURVE off in Compose it
   used to be empty, and any process that reached the port could save ten bogus checkpoints and
   prune the real ones). A ladder role's token is then ``""``: its writes are not
   authenticated, and the ladder says so at start.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping

from shared.messages import AdmitCandidate, EvalJobRequest, EvalReport, MeasureStrength, ReportEpisodes
from shared.transport import SERVER_SECRET, _curve_dir, _load_key

TOKEN_ENV = "ROYALEFLEET_CHECKPOINT_TOKEN"
_DERIVATION = b"royalefleet checkpoint writer v1"

LADDER_TOKEN_ENVS = {"learner": "ROYALEFLEET_LADDER_LEARNER_TOKEN",
                     "evaluator": "ROYALEFLEET_LADDER_EVALUATOR_TOKEN"}
"""The ladder's write roles and the variable that gives each its token."""
LADDER_WRITES: dict[type, str] = {ReportEpisodes: "learner", AdmitCandidate: "learner", MeasureStrength: "learner",
                                  EvalJobRequest: "evaluator", EvalReport: "evaluator"}
"""Every ladder request that changes what the ladder holds, and the role whose token it needs."""


def token_file(role: str) -> str:
    """The file name, in a keys folder, of ladder role ``role``'s token (for a role that holds no
    server secret to derive it from)."""
    return f"ladder-{role}.token"


def derive(secret_key: bytes, purpose: bytes) -> str:
    """The token for ``purpose`` derived from the servers' secret key (hex, 64 characters)."""
    return hmac.new(secret_key, purpose, hashlib.sha256).hexdigest()


def ladder_purpose(role: str) -> bytes:
    if role not in LADDER_TOKEN_ENVS:
        raise ValueError(f"ladder role {role!r}: the roles with a ladder token are {sorted(LADDER_TOKEN_ENVS)}")
    return f"royalefleet ladder {role} v1".encode()


def _token(env_var: str, purpose: bytes, file_name: str | None, environ: Mapping[str, str] | None) -> str:
    env = os.environ if environ is None else environ
    token = env.get(env_var, "")
    if token:
        return token
    folder = _curve_dir(env)
    if folder is None:
        return ""
    secret_path = os.path.join(folder, SERVER_SECRET)
    if file_name is not None and not os.path.exists(secret_path):
        path = os.path.join(folder, file_name)
        try:
            with open(path, encoding="ascii") as fh:
                token = fh.read().strip()
        except (OSError, ValueError) as exc:
            raise OSError(f"role token {path}: {exc} (neither {SERVER_SECRET} nor the token file is in the keys "
                          f"folder {folder}: make them with `royalefleet keys`, or set {env_var})") from None
        if not token:
            raise OSError(f"role token {path} is empty (run `royalefleet keys` again, or set {env_var})")
        return token
    _, secret = _load_key(secret_path, secret=True)
    assert secret is not None  # _load_key(secret=True) raises instead
    return derive(secret, purpose)


def checkpoint_token(environ: Mapping[str, str] | None = None) -> str:
    """The writer token from the environment (module docstring); never empty. Raises OSError
    when there is none (no ``ROYALEFLEET_CHECKPOINT_TOKEN`` and CURVE off), naming both ways to
    give one, and naming the file when CURVE is on but the servers' secret key cannot be read (a
    server process without its key cannot serve anyway)."""
    token = _token(TOKEN_ENV, _DERIVATION, None, environ)
    if not token:
        raise OSError(f"no checkpoint writer token: {TOKEN_ENV} is unset and CURVE is off, so any process that "
                      f"reaches the checkpoint port could save and prune checkpoints; give the learner and the "
                      f"checkpoint service the same {TOKEN_ENV} (`royalefleet up` draws one; FLEET_CHECKPOINT_TOKEN "
                      f"under Compose), or turn CURVE on (ROYALEFLEET_CURVE_DIR)")
    return token


def ladder_token(role: str, environ: Mapping[str, str] | None = None) -> str:
    """Ladder role ``role``'s token (``learner`` or ``evaluator``; module docstring), or ``""``
    when the ladder's writes are not authenticated. Raises OSError naming the file when CURVE is
    on and neither the servers' secret key nor the role's token file can be read; ValueError for
    another role."""
    return _token(LADDER_TOKEN_ENVS[role] if role in LADDER_TOKEN_ENVS else "", ladder_purpose(role),
                  token_file(role), environ)


def ladder_tokens(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the ladder expects: role -> token (``""``: that role's writes not authenticated)."""
    return {role: ladder_token(role, environ) for role in LADDER_TOKEN_ENVS}


def token_matches(given: str, expected: str) -> bool:
    """Constant-time comparison; any token matches when ``expected`` is ``""``, which only an
    in-process service built without one has (a started service always has one:
    ``checkpoint_token``)."""
    return not expected or hmac.compare_digest(given.encode(), expected.encode())


def ladder_refusal(body, expected: Mapping[str, str]) -> str | None:
    """Why the ladder refuses request ``body`` for its token (None: accepted). ``expected``:
    ``ladder_tokens()``."""
    role = LADDER_WRITES.get(type(body))
    if role is None or token_matches(getattr(body, "token", ""), expected.get(role, "")):
        return None
    return (f"{type(body).__name__}: missing or wrong {role} token; only the run's {role} may send it (it reads "
            f"the token from {LADDER_TOKEN_ENVS[role]}, or from the keys `royalefleet keys` made for its role)")


class Stamped:
    """A ``transport.Client`` (or anything with its ``request``) whose ladder writes carry
    ``token``: ``request`` sets the ``token`` of every body in ``LADDER_WRITES`` before it is
    sent. Every other attribute is the client's."""

    def __init__(self, client, token: str):
        self._client, self._stamp = client, token

    def request(self, body, arrays=None, **kwargs):
        if type(body) in LADDER_WRITES:
            body.token = self._stamp
        return self._client.request(body, arrays, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._client, name)
