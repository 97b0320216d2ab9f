"""Probe rows: a few packed observations with the log-probabilities an actor gave its actions,
stored beside a snapshot's weights so that whoever loads them can check they play as trained.

A clone (royalefleet/clone.py) stores its probes in its snapshot's ``spec.json`` (``probe``):
validation choice rows, the teacher's action on each, and the log-probability the clone's actor
gives it AS STORED (float16 weights upcast to float32, ``shared.nn.snapshot.load_frozen_actor``),
so a load that verifies reproduces them to float32 round-off. A warm start checks them before
training starts; ``royalefleet clone`` checks them after writing.
"""

from __future__ import annotations

import base64

import numpy as np

PROBE_ROWS = 4
"""Rows per probe: enough that a wrong network or codec is seen, small enough for spec.json
(one row is ~15 KB at the cpu profile, base64 4/3 of that)."""
PROBE_TOLERANCE = 1e-4
"""Largest |difference| in nats a verifying load may show: the same fp32 CPU kernels give the
same values; other thread counts or BLAS builds move the last bits only."""


class ProbeMismatch(ValueError):
    """The loaded actor does not give the probe rows the stored log-probabilities; the text names
    the snapshot, the largest difference and the tolerance."""


def probe_log_probs(actor, codec, rows: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """(P,) float64: log p(actions[i] | rows[i]) under ``actor`` (a PointerActor, float32, CPU),
    the masked softmax of ``shared.nn.distribution``. ``rows`` (P, row_bytes) uint8."""
    import torch

    from shared.nn.distribution import MaskedCategorical

    u = codec.unpack(rows)
    obs = {k: torch.tensor(v) for k, v in u.items()}
    with torch.no_grad():
        dist = MaskedCategorical(actor(obs), obs["mask"])
        return dist.log_prob(torch.as_tensor(actions, dtype=torch.int64)).double().numpy()


def make_probe(actor, codec, rows: np.ndarray, actions: np.ndarray) -> dict:
    """The JSON-able probe of ``actor`` on ``rows`` / ``actions``."""
    return {"rows": [base64.b64encode(r.tobytes()).decode() for r in rows],
            "actions": [int(a) for a in actions],
            "log_probs": [float(x) for x in probe_log_probs(actor, codec, rows, actions)],
            "tolerance": PROBE_TOLERANCE}


def verify_probe(snapshot_id: str, actor, codec, probe: dict) -> float:
    """The largest |difference| between ``probe``'s stored log-probabilities and ``actor``'s.
    Raises ProbeMismatch when it exceeds the probe's tolerance, or when a row is not of the
    codec's row size (another codec table)."""
    rows = [np.frombuffer(base64.b64decode(r), np.uint8) for r in probe["rows"]]
    if any(len(r) != codec.row_bytes for r in rows):
        raise ProbeMismatch(f"snapshot {snapshot_id}: probe rows of {sorted({len(r) for r in rows})} B, this "
                            f"codec packs {codec.row_bytes} B rows")
    got = probe_log_probs(actor, codec, np.stack(rows), np.asarray(probe["actions"], np.int64))
    diff = float(np.max(np.abs(got - np.asarray(probe["log_probs"], np.float64)))) if len(rows) else 0.0
    if not diff <= float(probe["tolerance"]):
        raise ProbeMismatch(f"snapshot {snapshot_id}: the loaded actor's probe log-probs differ from the stored "
                            f"ones by up to {diff:.3g} nats (tolerance {probe['tolerance']}): not the weights or "
                            "the codec the clone was trained with")
    return diff
