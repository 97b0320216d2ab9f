"""The learner's status line on RoyaleViser's status channel (``shared/viser.py``), off by default.

``--viser HOST:PORT`` (``ROYALEFLEET_VISER``; the address the viewer streams from, as
``python -m royaleviser --stream HOST:PORT``) binds the status channel on PORT + 1, where the
viewer says hello for it. After each metric row is written, the same facts as the progress line
(``measures.progress_line``) go out as one status: the iteration, learner timesteps and their
rate, the update's seconds, the win rates against the scripted opponents and the pool with their
episode counts, the KL, clip fraction and entropy, and lost rows; plus the losses, explained
variance, gradient norm and learning rate the panel has rows for. Nothing is sent while no
viewer says hello; nothing ever waits for one.
"""

from __future__ import annotations

from typing import Any

from shared.service_main import Say

PANEL = (
    ("iteration", "run/iteration"),
    ("policy_loss", "ppo/policy_loss"),
    ("value_loss", "ppo/value_loss"),
    ("entropy", "ppo/entropy"),
    ("kl", "ppo/kl"),
    ("clip_frac", "ppo/clip_fraction"),
    ("explained_var", "ppo/explained_variance"),
    ("grad_norm", "ppo/grad_norm_actor"),
    ("learning_rate", "ppo/lr_actor"),
    ("env_steps_per_s", "throughput/env_steps_per_second"),
    ("pool_size", "ladder/pool_size"),
)
"""The viewer's fixed panel rows (its field name, the metric row's key)."""

EXTRA = (
    ("timesteps", "run/timesteps"),
    ("learner timesteps/s", "throughput/collected_steps_per_second"),
    ("update s", "time/update"),
    ("win vs scripted", "env/win_rate_scripted"),
    ("win vs pool", "env/win_rate_pool"),
    ("episodes vs pool", "env/episodes_pool"),
    ("rows lost", "health/rows_invalid"),
)
"""The progress line's other facts, under ``extra`` by these names, in this order."""


def learning_status(row: dict, run: str) -> dict[str, Any]:
    """The status (the viewer's ``Learning`` fields) of one metric row: ``PANEL`` and ``EXTRA``'s
    keys that the row holds (an absent key is left out, never sent as 0), ``run`` the run's name,
    and ``extra["episodes vs scripted"]``, the sum of the row's ``env/episodes_vs/*`` (the ``n``
    of the progress line's win rate) when it has a scripted win rate."""
    out: dict[str, Any] = {"run": run}
    for field, key in PANEL:
        if key in row:
            out[field] = row[key]
    extra: dict[str, Any] = {}
    for name, key in EXTRA:
        if key in row:
            extra[name] = row[key]
        if key == "env/win_rate_scripted" and key in row:
            extra["episodes vs scripted"] = sum(v for k, v in row.items() if k.startswith("env/episodes_vs/"))
    out["extra"] = extra
    return out


class ViserStatus:
    """The learner's status sender: ``publish(row)`` after each row (``row.write_row``)."""

    def __init__(self, stream: str, run: str, say: Say):
        """Bind the status channel for a viewer streaming from ``stream`` (HOST:PORT). Raises
        ValueError for an address that is not HOST:PORT, OSError when it cannot be bound."""
        from shared.viser import StatusChannel, status_address

        host, port = status_address(stream)
        self.channel = StatusChannel(host, port)
        self.run = run
        say(f"learner: the status line goes to RoyaleViser's status channel on {host}:{self.channel.address[1]} "
            f"while a viewer watches (python -m royaleviser --stream {stream})")

    def publish(self, row: dict) -> bool:
        """Send ``row``'s status if a viewer is attached (else keep it for the next one)."""
        return self.channel.publish(learning_status(row, self.run))

    def close(self) -> None:
        self.channel.close()


def open_status(stream: str, run: str, say: Say) -> ViserStatus | None:
    """A ``ViserStatus`` for ``stream``, or None when it is "" (off). An address that cannot be
    bound or parsed is said and the learner trains on without it (a viewer is never a reason
    not to train)."""
    if not stream:
        return None
    try:
        return ViserStatus(stream, run, say)
    except (OSError, ValueError) as exc:
        say(f"learner: --viser {stream}: {exc}; training without RoyaleViser's status")
        return None
