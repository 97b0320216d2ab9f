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
3. Else none (``""``): saves are not authenticated, and the checkpoint service says so at start.
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
    """The writer token from the environment (module docstring), or ``""`` when saves are not
    authenticated. Raises OSError naming the file when CURVE is on but the servers' secret key
    cannot be read (a server process without its key cannot serve anyway)."""
    env = os.environ if environ is None else environ
    token = env.get(TOKEN_ENV, "")
    if token:
        return token
    folder = _curve_dir(env)
    if folder is None:
        return ""
    _, secret = _load_key(os.path.join(folder, SERVER_SECRET), secret=True)
    return hmac.new(secret, _DERIVATION, hashlib.sha256).hexdigest()


def token_matches(given: str, expected: str) -> bool:
    """Constant-time comparison; any token matches when ``expected`` is ``""`` (not authenticated)."""
    return not expected or hmac.compare_digest(given.encode(), expected.encode())
