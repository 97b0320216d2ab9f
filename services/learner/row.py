"""Step 6 of an iteration (docs/iteration.md): the metric row (every key is in
``shared/metric_schema.py``), written to ``runs/<run>/metrics.jsonl``, exported on
``/metrics`` and printed as the progress line. Its pure measures are
``services/learner/measures.py``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from services.learner import metric_log
from services.learner.frozen import frozen_metrics
from services.learner.gae import credit_horizon_seconds
from services.learner.measures import (
    choice_metrics, episode_metrics, lost_cells, overlap_rows_frac, play_metrics, progress_line,
)

if TYPE_CHECKING:
    from services.learner.algorithm import RowKeys, TrainResult
    from services.learner.collected import Collected
    from services.learner.parts import IterationState, LearnerParts


def assemble_row(parts: LearnerParts, state: IterationState, t_start: float, c: Collected, result: TrainResult,
                 keys: RowKeys, learner_eps: list) -> tuple[dict, list]:
    """The row's keys known once the update ran (the counters in ``state`` already advanced;
    ``t_start``: ``time.monotonic()`` at the process's start), the algorithm's ``keys`` at
    their anchors, and the episodes to report to the result log (those whose frozen seat could
    play)."""
    adv, upd = result.advantages, result.update
    cfg, rect, stats, T = parts.cfg, c.rect, c.stats, c.T
    t_collect, n_train = c.seconds, upd.n_train
    gamma, lam = c.sched["gamma"], cfg.advantage.gae_lambda
    lost = lost_cells(rect, T)
    row = {
        "run/iteration": c.iteration, "run/timesteps": state.timesteps, "run/env_steps": state.env_steps,
        "run/episodes": state.episodes, "run/wall_seconds": time.monotonic() - t_start,
        "run/gamma": gamma, "run/credit_horizon_seconds": credit_horizon_seconds(gamma, lam, parts.pf.spec.decision_ms),
        "run/cycles": T, "run/slots": rect.R, "run/battles": c.slot_map.n_battles, "run/learner_rows_per_cycle": c.learner_rows,
        "throughput/collected_steps_per_second": n_train / t_collect if t_collect > 0 else 0.0,
        "throughput/env_steps_per_second": stats.env_steps / t_collect if t_collect > 0 else 0.0,
        "throughput/inference_ms_per_round": 1000 * stats.inference_seconds / max(stats.rounds, 1),
        "throughput/parent_wait_frac": stats.wait_seconds / t_collect if t_collect > 0 else 0.0,
        "time/collection": t_collect, "time/inference": stats.inference_seconds, "time/critic_pass": adv.critic_seconds,
        "time/gae": adv.gae_seconds, "time/update": upd.seconds,
        "health/rollouts": len(c.members), "health/rollouts_lost": len(stats.lost),
        "health/rows_invalid": lost, "health/rows_invalid_frac": lost / max(1, c.learner_rows * T),
        "health/trainable_rows": n_train, "health/messages_refused": stats.refused,
        "health/illegal_action_rate": stats.illegal / max(1, n_train),
        "health/nan_guard_trips": adv.nan_trips,
        "health/obs_codec_clipped": stats.codec_clipped, "health/obs_codec_rounded": stats.codec_rounded,
        "health/buffer_fill_frac": rect.writes / ((T + 1) * rect.R),
        "throughput/rollout_capacity_ratio": upd.seconds / t_collect if t_collect > 0 else 0.0,
    }
    row.update(keys.after_schedule)
    row.update(play_metrics(rect, parts.pf, T))
    row.update(choice_metrics(rect, adv.trainable))
    row.update(keys.after_choice)
    if stats.batch_rows:
        row["throughput/inference_batch_rows_mean"] = float(np.mean(stats.batch_rows))
        row["throughput/inference_batch_rows_p90"] = float(np.percentile(stats.batch_rows, 90))
        row["throughput/inference_forwards"] = len(stats.batch_rows)
    if stats.rows_received:
        row["throughput/wire_bytes_per_row"] = stats.wire_bytes / stats.rows_received
        row["throughput/wire_encode_us_per_row"] = 1e6 * stats.wire_encode_seconds / stats.rows_received
        row["throughput/wire_decode_us_per_row"] = 1e6 * stats.wire_decode_seconds / stats.rows_received
    if parts.device.type == "cuda":  # CUDA only: a CPU learner has no device memory to watch
        from services.learner.vram import vram_row

        row.update(vram_row(parts.device))
    if c.inference_precision:
        row["run/inference_precision"] = c.inference_precision
    if n_train:
        row["run/train_precision"] = parts.model.last_precision.get("critic", "fp32")
    row.update(keys.after_update)
    row.update(episode_metrics(learner_eps, cfg.env.max_steps, stats.frozen.tainted))
    # an episode whose frozen seat played the no-op (its snapshot could not play) was
    # no game against that snapshot: kept out of the result log (services/learner/frozen.py).
    reported = [e for e in stats.episodes if (e.battle, e.ordinal) not in stats.frozen.tainted]
    actors = c.frozen_counts if c.frozen_counts is not None else parts.frozen
    row.update(frozen_metrics(stats.frozen, actors, len(stats.episodes) - len(reported)))
    row.update(keys.after_frozen)
    row.update(overlap_rows_frac(rect, adv.trainable))
    if stats.frozen.noop_rows:
        parts.say(f"learner: {sum(stats.frozen.noop_rows.values())} frozen-seat rows played the no-op "
                    f"({', '.join(f'{k} {v}' for k, v in sorted(stats.frozen.noop_rows.items()))}); "
                    f"{len(stats.episodes) - len(reported)} seat-episodes kept out of the result log")
    row.update(keys.end)
    return row, reported


def write_row(parts: LearnerParts, row: dict) -> tuple[bytes, bool]:
    """Append ``row`` (plain: ``metric_log.plain_row``) to metrics.jsonl, export and print it;
    returns (the encoded line, whether the file took it). A disk that refuses (OSError) is
    said, not raised."""
    line = msgspec.json.encode(row) + b"\n"
    written = True
    try:
        metric_log.append_row(parts.metrics_path, line)
    except OSError as exc:
        written = False
        parts.say(f"learner: metric row of iteration {row['run/iteration']} NOT written to {parts.metrics_path} "
                    f"({exc}); it is kept with this iteration's checkpoint, which a resume restores it from")
    parts.metrics.export(row)
    parts.curves.write(row)  # TensorBoard's view of the same row (services/learner/curves.py)
    parts.say(progress_line(row))
    if parts.viser_status is not None:  # the same facts to RoyaleViser's status channel (UDP, never waits)
        parts.viser_status.publish(row)
    return line, written

