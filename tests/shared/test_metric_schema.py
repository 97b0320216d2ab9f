"""Every key a learner metric row can hold has one definition in shared.metric_schema.SCHEMA
(unit and meaning), and maps to a valid Prometheus gauge."""

import ast
import math
import pathlib
import re

import numpy as np
import pytest
import torch
from prometheus_client import generate_latest
from torch import nn

from services.learner.metrics import LearnerMetrics
from services.learner.ppo import UpdateData, ppo_update
from services.learner.measures import episode_metrics as _episode_metrics
from shared.config import PPOConfig
from shared.messages import EpisodeRecord
from shared.metric_schema import SCHEMA, prometheus_name, schema_key

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROM_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


# ----------------------------------------------------------------------------- a tiny real update


class TableModel(nn.Module):
    """Logits and values as free parameters, one row per cell (as in tests/services/learner/test_ppo.py)."""

    def __init__(self, n, a):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.actor, self.critic = nn.Module(), nn.Module()
        self.actor.table = nn.Parameter(torch.randn(n, a, generator=g))
        self.critic.table = nn.Parameter(torch.randn(n, generator=g))

    def actor_logits(self, obs):
        return self.actor.table[obs["row"]]

    def value(self, obs):
        return self.critic.table[obs["row"]]


def ppo_keys(n_epochs=2):
    n, a = 12, 4
    rng = np.random.default_rng(0)
    masks = np.ones((n, a), bool)
    masks[::3, 1:] = False  # every third row forced (only the no-op legal)
    actions = np.where(masks.sum(1) > 1, rng.integers(1, a, n), 0)
    old_lp = np.where(masks.sum(1) > 1, np.log(1.0 / a), 0.0)
    masks_t = torch.as_tensor(masks)
    data = UpdateData(
        actions=actions.astype(np.int64), old_log_probs=old_lp.astype(np.float32),
        advantages=rng.normal(size=n).astype(np.float32), returns=rng.normal(size=n).astype(np.float32),
        old_values=rng.normal(size=n).astype(np.float32), n_legal=masks.sum(1).astype(np.int32),
        fetch=lambda cells: {"row": torch.as_tensor(cells), "mask": masks_t[torch.as_tensor(cells)]},
    )
    model = TableModel(n, a)
    opt_a = torch.optim.SGD(model.actor.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(model.critic.parameters(), lr=0.1)
    ppo = PPOConfig(n_epochs=n_epochs, batch_size=6, minibatch_size=3, timesteps_per_iteration=12)
    return ppo_update(model, opt_a, opt_c, data, ppo, lambda e: np.random.default_rng([1, e]), "cpu",
                      ent_coef=0.01, ent_coef_noop=0.02)


@pytest.fixture(scope="module")
def ppo_metrics():
    return ppo_keys()


def test_every_key_ppo_update_returns_is_in_the_schema(ppo_metrics):
    # The update had choice rows and varied returns: every optional key is present.
    assert {"ppo/kl", "ppo/kl_epoch0", "ppo/kl_epoch1", "ppo/clip_fraction_epoch1", "ppo/explained_variance",
            "ppo/explained_variance_choice", "ppo/actor_optimizer_steps"} <= set(ppo_metrics)
    missing = [k for k in ppo_metrics if schema_key(k) is None]
    assert missing == []
    assert schema_key("ppo/kl_epoch1") == "ppo/kl_epoch{epoch}"
    assert schema_key("ppo/actor_optimizer_steps") == "ppo/actor_optimizer_steps"
    assert all(isinstance(v, float) and math.isfinite(v) for v in ppo_metrics.values())


# ----------------------------------------------------------------------------- the service's keys


ROW_MODULES = ("service.py", "publish.py", "row.py", "measures.py", "collection.py", "advantages.py", "ppo/learner.py", "overlap.py",
               "fleet.py")
"""The learner's stages that write keys of the metric row (services/learner/)."""


def service_literal_keys() -> set[str]:
    """Every metric-looking string literal in the learner's row-writing stages (the row's keys)."""
    pattern = re.compile(r"(run|throughput|time|health|ppo|env|policy)/[A-Za-z0-9_/:]*")
    keys = set()
    for name in ROW_MODULES:
        path = ROOT / "services/learner" / name
        tree = ast.parse(path.read_text())
        keys |= {n.value for n in ast.walk(tree)
                 if isinstance(n, ast.Constant) and isinstance(n.value, str) and pattern.fullmatch(n.value)}
    return keys


def test_every_key_the_service_writes_is_in_the_schema():
    keys = service_literal_keys()
    assert len(keys) > 40 and "run/iteration" in keys and "time/update" in keys
    for key in keys:
        if key.endswith("/"):  # a family prefix, as used for f"env/win_rate_vs/{opp}"
            assert any(f.startswith(key) and "{" in f for f in SCHEMA), key
        else:
            assert schema_key(key) == key, key


def ep(opponent, outcome, truncated=False, steps=100, ret=0.0, cards=0, player="learner"):
    return EpisodeRecord(battle=0, ordinal=0, seat="blue", role="scripted" if opponent.startswith("scripted:") else "mirror",
                         player=player, opponent=opponent, outcome=outcome, truncated=truncated,
                         episode_steps=steps, episode_ticks=10 * steps, own_crowns=0, enemy_crowns=0,
                         own_tower_hp_frac=1.0, enemy_tower_hp_frac=1.0, elixir_leak_steps=0,
                         elixir_count_exact=True, cards_played=cards, undiscounted_return=ret)


EPISODES = [
    ep("scripted:noop", 1, steps=100, ret=1.0, cards=5),
    ep("scripted:noop", 0, truncated=True, steps=480, ret=0.5, cards=3),
    ep("scripted:random_legal", -1, steps=200, ret=-1.0, cards=0),
    ep("learner", 1, steps=300, ret=2.0, cards=8),
]


def test_episode_metrics_by_hand_and_in_the_schema():
    row = _episode_metrics(EPISODES, 480)
    assert row == {
        "env/episodes": 4,
        "env/episode_steps_p50": 250.0,                  # steps 100, 200, 300, 480
        "env/episode_steps_p95": pytest.approx(453.0),   # 300 + 0.85 * 180 (linear interpolation)
        "env/episode_steps_at_cap_frac": 0.25,
        "env/draw_rate": 0.25,
        "env/return_mean": 0.625,                        # (1 + 0.5 - 1 + 2) / 4
        "policy/cards_per_match": 4.0,
        "env/win_rate_scripted": pytest.approx(1 / 3),
        "env/win_rate_vs/scripted:noop": 0.5,
        "env/episodes_vs/scripted:noop": 2,
        "env/win_rate_vs/scripted:random_legal": 0.0,
        "env/episodes_vs/scripted:random_legal": 1,
        "env/elixir_count_exact_frac": 1.0,
        # The one mirror episode, on blue, was won: Wilson at n=1, z=1.96: centre (1 + z^2/2)/(1 + z^2)
        # = 0.6033, half-width z sqrt(z^2/4)/(1 + z^2) = 0.3967.
        "env/win_rate_by_seat": 1.0,
        "env/win_rate_by_seat_ci95_lo": pytest.approx(0.20654, abs=1e-5),
        "env/win_rate_by_seat_ci95_hi": 1.0,
    }
    assert [k for k in row if schema_key(k) is None] == []
    assert _episode_metrics([], 480) == {}  # nothing to measure: absent, not zero
    # Mirror episodes only: no scripted keys at all.
    assert not any("scripted" in k for k in _episode_metrics(EPISODES[3:], 480))


def test_the_pool_win_rate_is_one_key_over_every_snapshot_and_leaves_out_the_no_op_seats():
    import msgspec

    from services.learner.measures import progress_line

    def pool(opponent, outcome, battle=0, ordinal=0, **kw):
        return msgspec.structs.replace(ep(opponent, outcome, **kw), role="pool", battle=battle, ordinal=ordinal)

    episodes = [pool("snap:aaaaaaaaaaaaaaaa", 1), pool("snap:aaaaaaaaaaaaaaaa", -1, ordinal=1),
                pool("snap:bbbbbbbbbbbbbbbb", 1, battle=1), pool("snap:bbbbbbbbbbbbbbbb", 0, battle=1, ordinal=1, truncated=True),
                pool("snap:cccccccccccccccc", 1, battle=3, ordinal=2),
                pool("scripted:noop", 1, battle=4)]  # an empty pool's fallback: scripted, not pool
    row = _episode_metrics(episodes, 480)
    assert (row["env/win_rate_pool"], row["env/episodes_pool"]) == (0.6, 5)   # 3 won of 5; draw not won
    assert (row["env/win_rate_scripted"], row["env/episodes_vs/scripted:noop"]) == (1.0, 1)
    assert not [k for k in row if "snap" in k]   # never a key (so a label) per snapshot id
    assert [k for k in row if schema_key(k) is None] == []
    # battle 3's snapshot could not play (its seat played the no-op): no game against it.
    row = _episode_metrics(episodes, 480, tainted={(3, 2)})
    assert (row["env/win_rate_pool"], row["env/episodes_pool"]) == (0.5, 4)
    assert "env/win_rate_pool" not in _episode_metrics(episodes, 480, tainted={(0, 0), (0, 1), (1, 0), (1, 1), (3, 2)})
    assert "env/win_rate_pool" not in _episode_metrics(EPISODES, 480)
    line = progress_line({"run/iteration": 3, "run/timesteps": 10, **_episode_metrics(episodes, 480)})
    assert "| win vs scripted 1.00 (n=1) | win vs pool 0.60 (n=5) |" in line


# ----------------------------------------------------------------------------- names and definitions


def test_prometheus_names():
    assert prometheus_name("env/win_rate_vs/scripted:noop") == (
        "royalefleet_learner_env_win_rate_vs", {"opponent": "scripted:noop"})
    assert prometheus_name("ppo/kl") == ("royalefleet_learner_ppo_kl", {})
    assert prometheus_name("ppo/kl_epoch2") == ("royalefleet_learner_ppo_kl_epoch", {"epoch": "2"})
    assert prometheus_name("ppo/clip_fraction") == ("royalefleet_learner_ppo_clip_fraction", {})
    assert prometheus_name("env/episodes_vs/pool:17") == ("royalefleet_learner_env_episodes_vs", {"opponent": "pool:17"})
    assert prometheus_name("env/episodes") == ("royalefleet_learner_env_episodes", {})
    assert prometheus_name("throughput/env_steps_per_second") == ("royalefleet_learner_throughput_env_steps_per_second", {})


def test_every_schema_entry_is_defined_and_named_uniquely():
    names = {}
    for key, (unit, meaning) in SCHEMA.items():
        assert isinstance(unit, str) and unit.strip(), key
        assert isinstance(meaning, str) and meaning.strip(), key
        concrete = key.replace("{opponent}", "scripted:noop").replace("{epoch}", "0")
        assert schema_key(concrete) == key
        name, labels = prometheus_name(concrete)
        assert PROM_NAME.fullmatch(name), name
        assert bool(labels) == ("{" in key)
        assert name not in names, (key, names.get(name))
        names[name] = key


def test_a_full_row_exports_as_gauges(ppo_metrics):
    """Every key of a row built from the real producers becomes a gauge with its schema text."""
    row = {k: 1.0 for k in service_literal_keys() if not k.endswith("/")}
    row.update(ppo_metrics)
    row.update(_episode_metrics(EPISODES, 480))
    metrics = LearnerMetrics(None)
    metrics.export(row)
    text = generate_latest(metrics.registry).decode()
    assert 'royalefleet_learner_env_win_rate_vs{opponent="scripted:noop"} 0.5' in text
    assert 'royalefleet_learner_env_episodes_vs{opponent="scripted:random_legal"} 1.0' in text
    assert f'royalefleet_learner_ppo_kl_epoch{{epoch="1"}} {ppo_metrics["ppo/kl_epoch1"]!r}' in text
    assert f'royalefleet_learner_ppo_actor_optimizer_steps {ppo_metrics["ppo/actor_optimizer_steps"]!r}' in text
    unit, meaning = SCHEMA["ppo/actor_optimizer_steps"]
    assert f"# HELP royalefleet_learner_ppo_actor_optimizer_steps {meaning} [{unit}]" in text
    exported = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert {prometheus_name(k)[0] for k in row} <= exported
