"""The metric row's measures that are pure functions of one iteration: choice and play shares,
ability-button presses, lost cells, episode keys, the progress line (the row itself is
assembled in ``services/learner/row.py``).

Ability buttons (``env.ability_buttons``): action ``n_grid_actions + k`` presses button k
(``shared.envs.ObsSpec``); the rollout hands the action to RoyaleGym's ``TileActionParser``,
which turns it into the engine's button command (``DeployCommand(hand_slot=HAND_SIZE + k)``). A
press is counted where the learner chose it, over the cells it acted on, whether or not the
engine then took it (``deploy_status`` says)."""

from __future__ import annotations

import numpy as np

from services.learner.rectangle import Rectangle
from shared.messages import snapshot_of
from shared.stats import wilson_interval


def choice_metrics(rect: Rectangle, trainable: np.ndarray) -> dict:
    """How much choice the learner had and how often it waited: legal-action counts over its
    trainable rows (the no-op included), and the no-op share of its choice rows."""
    n_legal = rect.n_legal[:-1][trainable]
    if not len(n_legal):
        return {}
    p05, p50, p95 = np.percentile(n_legal, [5, 50, 95])
    out = {"policy/legal_actions_p05": float(p05), "policy/legal_actions_p50": float(p50),
           "policy/legal_actions_p95": float(p95)}
    choice = trainable & (rect.n_legal[:-1] > 1)
    if choice.any():
        out["policy/noop_rate"] = float(np.mean(rect.actions[choice] == 0))
    return out


def play_metrics(rect: Rectangle, pf, T: int) -> dict:
    """Where the learner plays: ``policy/tile_top1_share`` (share of its card plays on its most
    used tile: tile spam) and ``policy/card_tile_top10_share`` (share on its ten most used
    (card, tile) pairs: an exploited artefact). Absent when it played no card. With ability
    buttons, ``policy/button_presses`` counts its presses (``button_metrics``)."""
    spec = pf.spec
    out = button_metrics(rect, spec)
    acted = rect.acted & (rect.actions > 0) & ~spec.is_button(rect.actions)
    t_idx, r_idx = np.nonzero(acted)
    if not len(t_idx):
        return out
    tiles_per_slot = spec.height * spec.width
    a = rect.actions[t_idx, r_idx] - 1
    hand_slot, tile = a // tiles_per_slot, a % tiles_per_slot
    # The card in that hand slot, read off the row's own one-hot (by field name, never by offset).
    vector = pf.codec.unpack(rect.rows[t_idx, r_idx])["vector"]
    hand = vector[:, spec.field("own_hand_cards")].reshape(len(a), spec.hand_slots, -1)
    card = hand[np.arange(len(a)), hand_slot].argmax(axis=1)
    _, tile_counts = np.unique(tile, return_counts=True)
    _, pair_counts = np.unique(card * tiles_per_slot + tile, return_counts=True)
    return out | {
        "policy/tile_top1_share": float(tile_counts.max() / len(a)),
        "policy/card_tile_top10_share": float(np.sort(pair_counts)[::-1][:10].sum() / len(a)),
        "policy/cards_played": int(len(a)),
    }


def lost_cells(rect: Rectangle, T: int) -> int:
    """Learner cells whose transition never arrived: for each slot, the cycles after its last
    received step, counted while the slot's last known holder was the learner."""
    lost = 0
    for r in range(rect.R):
        got = np.flatnonzero(rect.step_valid[:, r])
        first_missing = (got[-1] + 1) if len(got) else 0
        if first_missing < T:
            seen = np.flatnonzero(rect.obs_valid[:, r])
            last_group = rect.group[seen[-1], r] if len(seen) else 0
            if last_group == 0:
                lost += T - int(first_missing)
    return lost


def episode_metrics(episodes: list, max_steps: int, tainted=frozenset()) -> dict:
    """The row's env/ keys over the learner's finished seat-episodes (``EpisodeRecord``s); empty
    without any. ``tainted``: (battle, ordinal) of episodes whose frozen seat played the no-op
    (``FrozenStats.tainted``), which are no game against their snapshot: left out of
    ``env/win_rate_pool``."""
    if not episodes:
        return {}
    out: dict = {"env/episodes": len(episodes)}
    steps = np.array([e.episode_steps for e in episodes], float)
    out["env/episode_steps_p50"] = float(np.percentile(steps, 50))
    out["env/episode_steps_p95"] = float(np.percentile(steps, 95))
    out["env/episode_steps_at_cap_frac"] = float(np.mean([e.truncated for e in episodes]))
    out["env/draw_rate"] = float(np.mean([e.outcome == 0 for e in episodes]))
    out["env/return_mean"] = float(np.mean([e.undiscounted_return for e in episodes]))
    out["policy/cards_per_match"] = float(np.mean([e.cards_played for e in episodes]))
    exact = [e.elixir_count_exact for e in episodes]
    out["env/elixir_count_exact_frac"] = float(np.mean(exact))
    terms: dict[str, list[float]] = {}
    for e in episodes:
        for name, value in e.reward_terms_abs.items():
            terms.setdefault(name, []).append(value)
    for name, values in terms.items():
        out[f"env/reward_terms_step_abs/{name}"] = float(np.mean(values))
    signed: dict[str, list[float]] = {}
    for e in episodes:
        for name, value in e.reward_terms.items():
            signed.setdefault(name, []).append(value)
    for name, values in signed.items():
        out[f"env/reward_terms/{name}"] = float(np.mean(values))
    if any(e.reward_terms_abs for e in episodes):
        # Per seat, before any averaging: a zero-sum term averaged over both seats reads 0.
        out["env/reward_shaping_abs"] = float(np.mean([sum(v for k, v in e.reward_terms_abs.items() if k != "terminal")
                                                       for e in episodes]))
        out["env/reward_terminal_abs"] = float(np.mean([e.reward_terms_abs.get("terminal", 0.0) for e in episodes]))
    mirror_blue = [e for e in episodes if e.role == "mirror" and e.seat == "blue"]
    if mirror_blue:
        wins = sum(1.0 if e.outcome > 0 else 0.5 if e.outcome == 0 else 0.0 for e in mirror_blue)
        lo, hi = wilson_interval(wins, len(mirror_blue))
        out["env/win_rate_by_seat"] = wins / len(mirror_blue)
        out["env/win_rate_by_seat_ci95_lo"], out["env/win_rate_by_seat_ci95_hi"] = lo, hi
    scripted = [e for e in episodes if e.opponent.startswith("scripted:")]
    if scripted:
        out["env/win_rate_scripted"] = float(np.mean([e.outcome > 0 for e in scripted]))
        for opp in sorted({e.opponent for e in scripted}):
            games = [e for e in scripted if e.opponent == opp]
            out[f"env/win_rate_vs/{opp}"] = float(np.mean([e.outcome > 0 for e in games]))
            out[f"env/episodes_vs/{opp}"] = len(games)
    # every snapshot together, never one key per snapshot id (unbounded over a run).
    pool = [e for e in episodes if snapshot_of(e.opponent) is not None and (e.battle, e.ordinal) not in tainted]
    if pool:
        out["env/win_rate_pool"] = float(np.mean([e.outcome > 0 for e in pool]))
        out["env/episodes_pool"] = len(pool)
    return out


def progress_line(row: dict) -> str:
    def f(key, fmt):
        return format(row[key], fmt) if key in row else "-"

    win = "-"
    if "env/win_rate_scripted" in row:
        n = sum(v for k, v in row.items() if k.startswith("env/episodes_vs/"))
        win = f"{row['env/win_rate_scripted']:.2f} (n={n})"
    if "env/win_rate_pool" in row:
        win += f" | win vs pool {row['env/win_rate_pool']:.2f} (n={row['env/episodes_pool']})"
    lost = ""
    if row.get("health/rows_invalid"):
        lost = f" | lost {row['health/rows_invalid']} rows ({row['health/rollouts_lost']} rollouts)"
    return (
        f"it {row['run/iteration']:>4} | ts {row['run/timesteps']:>9,} | {f('throughput/collected_steps_per_second', ',.0f')} ts/s"
        f" | update {f('time/update', '.1f')} s | win vs scripted {win} | kl {f('ppo/kl', '.2g')}"
        f" | clip {f('ppo/clip_fraction', '.3f')} | entropy {f('ppo/entropy', '.3f')}{lost}"
    )


def button_metrics(rect, spec) -> dict:
    """``policy/button_presses``: the learner's button actions over its acted cells of
    ``rect`` (``services.learner.rectangle.Rectangle``), and
    ``policy/button_presses_accepted``: those the engine accepted (``deploy_status`` 0).
    Empty for a spec without buttons (``spec.n_buttons`` 0), so such a run's rows are
    unchanged."""
    if not getattr(spec, "n_buttons", 0):
        return {}
    pressed = rect.acted & spec.is_button(rect.actions)
    accepted = pressed & rect.step_valid & (rect.deploy_status == 0)
    return {"policy/button_presses": int(np.count_nonzero(pressed)),
            "policy/button_presses_accepted": int(np.count_nonzero(accepted))}


def policy_lag_metrics(rect, trainable: np.ndarray) -> dict:
    """``ppo/policy_lag_mean`` and ``ppo/policy_lag_max`` over the trainable rows (the policy
    the PPO ratio is taken against); empty without any."""
    lag = rect.policy_lag[trainable]
    if not len(lag):
        return {}
    return {"ppo/policy_lag_mean": float(lag.mean()), "ppo/policy_lag_max": int(lag.max())}


def overlap_rows_frac(rect, trainable: np.ndarray) -> dict:
    """``throughput/overlap_rows_frac``: the share of the trainable rows inferred while an
    update ran (the lag-1 ones); empty without any."""
    lag = rect.policy_lag[trainable]
    if not len(lag):
        return {}
    return {"throughput/overlap_rows_frac": float(np.mean(lag > 0))}
