"""The training dashboard (`grafana/dashboards/training.json`): one function a row, each giving that
row's panels; ``ROWS`` puts them in order. A new row: a function here and its line in ``ROWS``;
a new panel: one more ``ts(...)`` in its row's list (``royalefleet.grafana.panels.ts``)."""

from __future__ import annotations

from royalefleet.grafana.common import learner as L
from royalefleet.grafana.panels import Row, dashboard, ts

UID = "royalefleet-training"
TITLE = "royalefleet: training"
DESCRIPTION = ("Throughput, PPO health, reward terms, episode lengths and alarms of the learner's "
               "metric row.")

ALARM_PANEL = "Alarms: consecutive iterations held"
"""The alarms row's first panel: every Grafana alert rule of the table links to it."""


def throughput() -> list[dict]:
    """Timesteps and decisions per second, the iteration split, waiting and capacity."""
    return [
        ts("Learner timesteps per second", [
            (L("throughput/collected_steps_per_second"), "collected (collection seconds)"),
            (L("throughput/overall_steps_per_second"), "trained (whole iteration)"),
        ], description="Learner transitions per second, from the metric row."),
        ts("Battle decisions per second", [
            (L("throughput/env_steps_per_second"), "learner's view (collection seconds)"),
            ("sum(rate(royalefleet_rollout_decisions_total[5m]))", "all rollouts (their counters)"),
        ], description="Both seats of every battle; the rollout counters are read with rate() because a "
                       "restarted rollout starts them at 0."),
        ts("Iteration time split", [
            (L("time/iteration"), "iteration"), (L("time/collection"), "collection"),
            (L("time/inference"), "inference"), (L("time/critic_pass"), "critic pass"),
            (L("time/gae"), "gae"), (L("time/update"), "update"), (L("time/checkpoint"), "checkpoint"),
        ], unit="s"),
        ts("Learner waiting for rounds", [(L("throughput/parent_wait_frac"), "share of collection")],
           unit="percentunit", description="Above 0.3 the learner starves: add rollouts."),
        ts("Inference per round", [(L("throughput/inference_ms_per_round"), "ms a round")], unit="ms"),
        ts("Rollout capacity ratio", [(L("throughput/rollout_capacity_ratio"), "capacity ratio")],
           description="Rollout capacity / update capacity; capacity_ratio warns under 1.5."),
    ]


def ppo() -> list[dict]:
    """PPO health: KL, clip fraction, explained variance, entropy, gradients, the ratio invariant."""
    return [
        ts("KL (choice rows)", [(L("ppo/kl"), "kl")], description="Healthy 0.003-0.02; kl_high warns above 0.05, "
                                                                  "kl_dead below 1e-5."),
        ts("Clip fraction", [(L("ppo/clip_fraction"), "clipped"), (L("ppo/dual_clip_fraction"), "dual clip")],
           unit="percentunit", description="Healthy 0.05-0.2; clip_pinned halts above 0.5 for 3 iterations."),
        ts("Explained variance", [(L("ppo/explained_variance"), "all rows"),
                                  (L("ppo/explained_variance_choice"), "choice rows")],
           description="Critic health, 0.5-0.9 healthy; ev_negative warns after 50 iterations below 0."),
        ts("Entropy", [(L("ppo/entropy"), "policy"), (L("ppo/noop_entropy"), "play vs wait")], unit="none"),
        ts("Gradient norms (before clipping)", [(L("ppo/grad_norm_actor"), "actor"),
                                                (L("ppo/grad_norm_critic"), "critic")]),
        ts("Ratio invariant", [(L("ppo/ratio_max_abs_dev"), "max |ratio - 1|, first minibatch")],
           description="Should be ~0; ratio_invariant halts above 5 x the tolerance of the precision the "
                       "forwards ran in (ppo/ratio_atol: fp32 1e-4, tf32 5e-3, bf16 2e-2)."),
        ts("Losses", [(L("ppo/value_loss"), "value"), (L("ppo/policy_loss"), "policy")]),
        ts("Forced rows", [(L("ppo/forced_frac"), "single legal action")], unit="percentunit"),
    ]


def rewards() -> list[dict]:
    """Returns, reward terms, shaping against terminal, win rates, cards played."""
    return [
        ts("Returns and advantages", [(L("env/return_mean"), "episode return"),
                                      (L("ppo/return_mean"), "GAE return"),
                                      (L("ppo/advantage_mean"), "advantage")]),
        ts("Reward terms (per episode, signed)", [(L("env/reward_terms/{term}"), "{{term}}")],
           description="Each shaping term's per-episode sum."),
        ts("Shaping against terminal (per seat, absolute)", [(L("env/reward_shaping_abs"), "shaping"),
                                                             (L("env/reward_terminal_abs"), "terminal")],
           description="shaping_dominates warns when shaping is the larger for 5 iterations."),
        ts("Win rates", [(L("env/win_rate_vs/{opponent}"), "{{opponent}}"), (L("env/win_rate_scripted"), "all scripted"),
                         (L("env/win_rate_pool"), "all pool snapshots"), (L("env/draw_rate"), "draws")],
           unit="percentunit", description="Against pool snapshots: one series over whichever snapshots PFSP "
                                           "drew this iteration (env/episodes_pool games); per-member strength is "
                                           "the ladder dashboard's ratings."),
        ts("Cards per match", [(L("policy/cards_per_match"), "cards")],
           description="About 22 expected; noop_collapse warns under 8, noop_collapse_severe halts under 3."),
    ]


def episodes() -> list[dict]:
    """Episode lengths, episodes cut by the step limit, episodes per iteration."""
    return [
        ts("Episode length", [(L("env/episode_steps_p50"), "p50"), (L("env/episode_steps_p95"), "p95")],
           unit="none", description="Decisions per learner episode."),
        ts("Episodes cut by the step limit", [(L("env/episode_steps_at_cap_frac"), "at cap")], unit="percentunit"),
        ts("Episodes per iteration", [(L("env/episodes"), "all"), (L("env/episodes_vs/{opponent}"), "{{opponent}}")]),
    ]


def alarms() -> list[dict]:
    """The learner's own alarm counts (the Grafana alert rules link to this row's first panel)."""
    return [
        ts(ALARM_PANEL, [("royalefleet_learner_alarm_consecutive > 0", "{{alarm}} ({{severity}})")],
           description="The learner's own count; an alarm fires when it reaches the alarm's patience."),
        ts("Alarms holding now", [("sum by (severity) (royalefleet_learner_alarm_holds)", "{{severity}}")],
           kind="stat"),
    ]


def dqn() -> list[dict]:
    """DQN health (learner.algorithm = "dqn"; empty under PPO): TD error, Q magnitude and
    overestimation, exploration, head disagreement, replay age and priority spread."""
    return [
        ts("TD error", [(L("dqn/td_error_abs"), "|TD|, masked pairs"), (L("dqn/loss"), "Huber loss")]),
        ts("Q magnitude and overestimation", [(L("dqn/q_abs_mean"), "mean |Q(s, a)|"), (L("dqn/q_abs_max"), "max |Q(s, a)|"),
                                             (L("dqn/td_bias"), "Q - n-step target"),
                                             (L("dqn/overestimation"), "Q - realised n-step return")],
           description="q_diverging halts when max |Q| stays above alarms.dqn_q_abs_max (100) for 3 iterations."),
        ts("Behaviour policy", [(L("dqn/epsilon"), "epsilon"), (L("dqn/explore_frac"), "explored choice rows"),
                                (L("dqn/at_epsilon_floor"), "at the floor"),
                                (L("dqn/greedy_noop_frac"), "greedy rows waiting")], unit="percentunit",
           description="behaviour_dead warns when the greedy rows wait on >= 99.9 % of choice rows for 5 iterations."),
        ts("Head disagreement", [(L("dqn/head_disagreement"), "std over heads of Q(s, a)"),
                                 (L("dqn/heads_used"), "heads acted by")]),
        ts("Replay", [(L("dqn/replay_age_mean"), "mean age of drawn records"), (L("dqn/replay_size"), "records held")],
           unit="none"),
        ts("Priorities", [(L("dqn/priority_spread"), "max / min priority"), (L("dqn/is_weight_min"), "min IS weight")],
           unit="none"),
    ]


def anchor() -> list[dict]:
    """The warm start's hold and the KL anchor (the warm_start and imitation sections; empty
    without them)."""
    return [
        ts("KL to the anchor", [(L("imitation/kl"), "KL(pi || pi_ref)"), (L("imitation/kl_budget"), "budget")],
           description="Mean over choice rows. beta doubles above 1.5 x budget and halves below budget / 1.5; "
                       "anchor_budget_left warns above 3 x budget for 5 iterations."),
        ts("Anchor coefficient and actor hold", [(L("imitation/beta"), "beta used"),
                                                 (L("ppo/actor_lr_multiplier"), "actor lr multiplier")],
           unit="none", description="anchor_not_binding warns after 10 iterations of beta at imitation.beta_min; "
                                    "a multiplier of 0 is the warm start holding the actor still."),
    ]


def search() -> list[dict]:
    """The rollouts' search and the AlphaZero update (learner.algorithm = "alphazero"; empty
    otherwise): how much was searched and what it cost, how far the target moved the prior, the
    losses."""
    return [
        ts("Searched decisions", [(L("search/decisions"), "searched this iteration"),
                                  (L("throughput/searched_decisions_per_second"), "per second")], unit="none"),
        ts("Search cost", [(L("throughput/search_time_frac"), "share of the rollouts' time")], unit="percentunit",
           description="The search's share of the rollouts' stepping + search time (docs/learning.md, "
                       "\"An AlphaZero learner\")."),
        ts("Engine work", [(L("throughput/engine_steps_per_second"), "battles + simulations"),
                           (L("throughput/env_steps_per_second"), "battles")], unit="none"),
        ts("Search target", [(L("search/target_entropy"), "H(target)"), (L("search/target_kl_prior"), "KL(target, prior)"),
                             (L("az/kl_target"), "KL(target, actor) before the update")], unit="none",
           description="In nats; KL(target, prior) is how far the search moved the policy."),
        ts("AlphaZero losses", [(L("az/policy_loss"), "cross-entropy per searched row"), (L("az/value_loss"), "(V - z)^2")],
           unit="none"),
        ts("The search's questions to the learner", [(L("search/opponent_rows"), "opponent moves in simulations"),
                                                     (L("search/critic_leaves"), "leaves valued by the critic")],
           unit="none", description="Rows the learner answered mid-step this iteration: alphazero.sim_opponent "
                                    "\"battle\" and leaf_value \"critic\" (docs/protocol.md)."),
    ]


ROWS = [("Throughput", throughput), ("PPO health", ppo), ("Rewards and outcomes", rewards),
        ("Episode lengths", episodes), ("Alarms", alarms), ("DQN health", dqn), ("Warm start and KL anchor", anchor),
        ("Search (AlphaZero)", search)]
"""(row title, the function giving its panels), top to bottom. Panel ids follow this order,
so a row added at the end leaves every existing id (and the alert rules' panel link) alone."""


def rows() -> list[Row]:
    return [(title, panels()) for title, panels in ROWS]


def build() -> dict:
    """The dashboard's JSON model."""
    return dashboard(UID, TITLE, DESCRIPTION, rows())
