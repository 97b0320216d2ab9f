"""The checkpoint writer token: only the run's learner may write its checkpoints and snapshots.

The checkpoint service refuses a ``SaveCheckpoint`` or ``SaveSnapshot`` whose ``token`` is not
the one it was started with (``unauthorized``, counted), before it touches the disk: a refused
save writes nothing, creates no run folder and prunes nothing. Loads stay open.

Where the token comes from, the same rule in the learner and the checkpoint service:

1. ``ROYALEFLEET_CHECKPOINT_TOKEN`` when set. ``royalefleet up`` (``make run``) draws a fresh
   random one per start and gives it to exactly these two processes.
2. Else, with CURVE on (``ROYALEFLEET_CURVE_DIR``, as under Compose): derived from the servers'
   secret key (``server.key_secret``, present only where the servers run), so Compose needs no
   extra secret and a rollout host, which holds only its client key, cannot compute it.
3. Else none: ``checkpoint_token`` raises, and neither the learner nor the checkpoint service
   starts. The token is never empty (issue 38: with CURVE off in Compose it used to be, and any
   process that reached the port could save ten bogus checkpoints and prune the real ones).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping

from shared.transport import SERVER_SECRET, _curve_dir, _load_key

TOKEN_ENV = "ROYALEFLEET_CHECKPOINT_TOKEN"
_DERIVATION = b"royalefleet checkpoint writer v1"


def checkpoint_token(environ: Mapping[str, str] | None = None) -> str:
    """The writer token from the environment (module docstring); never empty. Raises OSError
    when there is none (no ``ROYALEFLEET_CHECKPOINT_TOKEN`` and CURVE off), naming both ways to
    give one, and naming the file when CURVE is on but the servers' secret key cannot be read (a
    server process without its key cannot serve anyway)."""
    env = os.environ if environ is None else environ
    token = env.get(TOKEN_ENV, "")
    if token:
        return token
    folder = _curve_dir(env)
    if folder is None:
        raise OSError(f"no checkpoint writer token: {TOKEN_ENV} is unset and CURVE is off, so any process that "
                      f"reaches the checkpoint port could save and prune checkpoints; give the learner and the "
                      f"checkpoint service the same {TOKEN_ENV} (`royalefleet up` draws one; FLEET_CHECKPOINT_TOKEN "
                      f"under Compose), or turn CURVE on (ROYALEFLEET_CURVE_DIR)")
    _, secret = _load_key(os.path.join(folder, SERVER_SECRET), secret=True)
    return hmac.new(secret, _DERIVATION, hashlib.sha256).hexdigest()


def token_matches(given: str, expected: str) -> bool:
    """Constant-time comparison; any token matches when ``expected`` is ``""``, which only an
    in-process service built without one has (a started service always has one:
    ``checkpoint_token``)."""
    return not expected or hmac.compare_digest(given.encode(), expected.encode())
