"""Every key of the learner's metric row: its unit and what it means. One definition each.

The row is one flat JSON object per iteration in ``runs/<run>/metrics.jsonl``; the same numbers
are exported as Prometheus gauges named ``royalefleet_learner_<key with / and . as _>`` (see
``prometheus_name``), a family key (``{opponent}``) as one gauge with a label. A key is absent
from a row when there is nothing to measure (no episode finished: no ``env/`` keys): a missing
key is not a zero. Names follow the reference harness wherever it has the metric.
"""

from __future__ import annotations

import re

from shared.algorithms import merged

# key -> (unit, meaning), but the learner algorithms' own (shared/algorithms.py), appended below
_CORE: dict[str, tuple[str, str]] = {
    # run
    "run/iteration": ("count", "iterations finished, this one included"),
    "run/timesteps": ("timesteps", "learner transitions trained on since the run began"),
    "run/env_steps": ("decisions", "battle decisions stepped since the run began (one battle advancing one decision)"),
    "run/episodes": ("episodes", "learner seat-episodes finished since the run began"),
    "run/wall_seconds": ("s", "wall time of this process since it started"),
    "run/gamma": ("ratio", "discount used by GAE this iteration"),
    "run/credit_horizon_seconds": ("s", "decision_s / (1 - gamma * lambda): how far back credit reaches"),
    "run/cycles": ("count", "cycles T in this iteration's rectangle"),
    "run/slots": ("count", "slots R in this iteration's rectangle (2 per battle)"),
    "run/battles": ("count", "battles in this iteration"),
    "run/state_digest": ("digest", "sha256 (16 hex) over the learner's weights, optimizers and update state after this iteration: equal digests, equal learners"),
    "run/run_id": ("id", "the run identity's sixteen hex characters (shared/identity.py)"),
    "run/train_precision": ("precision", "what the update's forwards computed in this iteration, read from torch at the "
                            "forward: fp32, tf32 (CUDA with TF32 allowed) or bf16 (CUDA bfloat16 autocast, net.autocast); "
                            "absent when nothing was trained"),
    "run/inference_precision": ("precision", "what the rollout-time actor forwards computed in this iteration (as "
                                "run/train_precision); absent when no choice row was inferred"),
    "run/resumed_with_drift": ("flag", "1 when this process resumed a checkpoint whose identity differed (--allow-identity-drift); absent otherwise"),
    "run/learner_rows_per_cycle": ("count", "slots the learner plays each cycle (both seats of a mirror, one otherwise)"),
    # throughput
    "throughput/collected_steps_per_second": ("timesteps/s", "learner timesteps collected / collection seconds"),
    "throughput/overall_steps_per_second": ("timesteps/s", "learner timesteps trained / iteration seconds"),
    "throughput/env_steps_per_second": ("decisions/s", "battle decisions / collection seconds"),
    "throughput/rollout_idle_frac": ("ratio", "mean over the rollouts present at this row and the last of the share of "
                                     "the wall time between them they were not stepping (from a Step sent to the "
                                     "shard's next round; services/learner/fleet.py IdleMeter); absent at a process's "
                                     "first row"),
    "throughput/inference_batch_rows_mean": ("rows", "mean learner rows per central-inference actor forward of the "
                                             "collection (batched inference: every ready round at once in the "
                                             "throughput tier; one round per forward under run_exact)"),
    "throughput/inference_batch_rows_p90": ("rows", "90th percentile of the learner rows per actor forward"),
    "throughput/inference_forwards": ("count", "central-inference actor forwards in the collection"),
    "throughput/inference_ms_per_round": ("ms", "mean learner inference time per received round"),
    "throughput/wire_bytes_per_row": ("bytes", "array bytes received per observation row, scalars included (compressed under wire codec 2)"),
    "throughput/wire_encode_us_per_row": ("us", "rollout CPU time compressing rows (wire codec 2) per observation row received; 0 under codec 1"),
    "throughput/wire_decode_us_per_row": ("us", "learner CPU time expanding and checking received rows per observation row; ~0 under codec 1"),
    "throughput/parent_wait_frac": ("fraction", "share of the collection the learner spent waiting for rounds"),
    # time
    "time/iteration": ("s", "wall time of the iteration"),
    "time/collection": ("s", "collecting the rectangle (inference included)"),
    "time/inference": ("s", "rollout-time actor forwards during collection"),
    "time/critic_pass": ("s", "the whole-rectangle value pass"),
    "time/gae": ("s", "GAE"),
    "time/update": ("s", "the PPO epochs"),
    "time/checkpoint": ("s", "capturing (and, when due, sending) the checkpoint"),
    "time/battle_states_wait": ("s", "waiting for the rollouts' battle states after the update (they save while it runs)"),
    "time/battle_states_save": ("s", "the slowest rollout's time saving its battles' states at the boundary"),
    # checkpoint: the battles' exact states (services/learner/battle_states.py)
    "checkpoint/battle_states": ("count", "battles whose exact state at this boundary the row's checkpoint holds"),
    "checkpoint/battle_states_bytes": ("bytes", "size of those states (engine state, observation memory, bookkeeping)"),
    # resume (only in the first row after a resume)
    "resume/battles_restored": ("count", "battles that continued their recorded episode exactly"),
    "resume/battles_refused": ("count", "recorded battle states refused (hash, engine build, battle id, load): those battles started afresh"),
    "resume/battles_unheld": ("count", "recorded battles no rollout holds now: kept in the checkpoint for a later rollout"),
    "resume/battles_missing": ("count", "battles the checkpoint had no state for (their rollout did not answer): started afresh"),
    # env (learner seats only)
    "env/episodes": ("episodes", "learner seat-episodes finished this iteration"),
    "env/win_rate_scripted": ("fraction", "learner wins / episodes against scripted opponents (draws and truncations count as not won)"),
    "env/win_rate_vs/{opponent}": ("fraction", "learner win rate against one opponent this iteration"),
    "env/episodes_vs/{opponent}": ("episodes", "learner episodes against one opponent this iteration"),
    "env/win_rate_pool": ("fraction", "learner wins / episodes against pool snapshots this iteration, all snapshots together "
                          "(draws and truncations count as not won; episodes whose snapshot could not play, "
                          "health/frozen_episodes_unreported, are left out)"),
    "env/episodes_pool": ("episodes", "learner episodes against pool snapshots this iteration: the count behind env/win_rate_pool"),
    "env/draw_rate": ("fraction", "learner episodes ending in a draw or a truncation"),
    "env/episode_steps_p50": ("decisions", "median episode length"),
    "env/episode_steps_p95": ("decisions", "95th percentile of episode length"),
    "env/episode_steps_at_cap_frac": ("fraction", "episodes cut by the step limit"),
    "env/return_mean": ("reward", "mean undiscounted learner return per episode"),
    "env/reward_terms_step_abs/{term}": ("reward", "per learner seat-episode, the sum of |F_t| of one reward term, mean over finished episodes: how loud the term is"),
    "env/reward_terms/{term}": ("reward", "per learner seat-episode, the signed sum of one reward term, mean over finished episodes"),
    "env/reward_shaping_abs": ("reward", "per learner seat-episode, the sum over shaping terms of sum |F_t|, mean over finished episodes"),
    "env/reward_terminal_abs": ("reward", "per learner seat-episode, |terminal reward|, mean over finished episodes"),
    "env/win_rate_by_seat": ("fraction", "blue's win rate in mirror battles this iteration (0.5 on a fair game)"),
    "env/win_rate_by_seat_ci95_lo": ("fraction", "Wilson 95 % lower bound of blue's win rate in mirror battles"),
    "env/win_rate_by_seat_ci95_hi": ("fraction", "Wilson 95 % upper bound of blue's win rate in mirror battles"),
    "env/elixir_count_exact_frac": ("fraction", "learner episodes whose opponent-elixir count stayed exact (healthy 0.99-1.0)"),
    "policy/tile_top1_share": ("fraction", "share of the learner's card plays this iteration on its most used tile (tile spam; healthy < 0.25)"),
    "policy/card_tile_top10_share": ("fraction", "share of the learner's card plays on its ten most used (card, tile) pairs (healthy < 0.5)"),
    "policy/legal_actions_p05": ("actions", "5th percentile of legal actions (no-op included) over the learner's trainable rows"),
    "policy/legal_actions_p50": ("actions", "median of legal actions (no-op included) over the learner's trainable rows"),
    "policy/legal_actions_p95": ("actions", "95th percentile of legal actions (no-op included) over the learner's trainable rows"),
    "policy/noop_rate": ("fraction", "share of the learner's choice rows (more than one legal action) on which it waited"),
    "policy/cards_played": ("cards", "cards the learner played this iteration"),
    "policy/button_presses": ("presses", "ability-button presses the learner chose this iteration (env.ability_buttons; absent without buttons)"),
    "policy/button_presses_accepted": ("presses", "the learner's ability-button presses the engine accepted (deploy_status 0) this iteration"),
    "policy/cards_per_match": ("cards", "cards the learner played per episode (the no-op collapse metric)"),
    # ppo
    "ppo/kl": ("nats", "choice-row KL (Schulman k3), last epoch"),
    "ppo/kl_epoch{epoch}": ("nats", "choice-row KL after epoch e"),
    "ppo/clip_fraction": ("fraction", "choice rows with |ratio - 1| > clip, last epoch"),
    "ppo/clip_fraction_epoch{epoch}": ("fraction", "clip fraction in epoch e"),
    "ppo/dual_clip_fraction": ("fraction", "choice rows where the dual clip bound binds"),
    "ppo/entropy": ("nats", "masked policy entropy over choice rows"),
    "ppo/noop_entropy": ("nats", "binary entropy of p(no-op) vs p(play) on choice rows"),
    "ppo/value_loss": ("reward^2", "mean squared error of V against the GAE return"),
    "ppo/policy_loss": ("reward", "clipped surrogate loss"),
    "ppo/explained_variance": ("fraction", "1 - Var(G - V) / Var(G) over all trainable rows"),
    "ppo/explained_variance_choice": ("fraction", "explained variance over choice rows"),
    # extensions (shared/learner_extension.py): present only in a run with learner hooks
    "ppo/actor_lr_multiplier": ("ratio", "the product of the extensions' actor learning-rate multipliers for this update "
                                "(0 held the actor's weights still); absent in a run without learner extensions"),
    "ppo/actor_frozen": ("flag", "1 when this update held the actor still (ppo/actor_lr_multiplier 0), else 0; absent "
                         "in a run without learner extensions"),
    "imitation/kl": ("nats", "KL(pi || pi_ref) over the legal actions, mean over the choice rows the update forwarded "
                     "(all epochs): how far the policy is from the anchor's snapshot (imitation section)"),
    "imitation/beta": ("coefficient", "the anchor's coefficient this update used (imitation.beta, adapted toward "
                       "imitation.kl_budget)"),
    "imitation/beta_next": ("coefficient", "the coefficient the next update uses: beta doubled when imitation/kl > "
                            "1.5 x budget, halved when < budget / 1.5 (bounded by beta_min, beta_max)"),
    "imitation/kl_budget": ("nats", "the KL budget of this update (imitation.kl_budget, times its schedule)"),
    "imitation/kl_budget_ratio": ("ratio", "imitation/kl / imitation/kl_budget: above 1.5 the policy has left the budget"),
    "imitation/beta_at_floor": ("flag", "1 when imitation/beta_next is at imitation.beta_min: the anchor no longer "
                                "binds (the policy stays within budget with the smallest pull)"),
    "ext/{key}": ("value", "a metric of a user's learner extension (its package documents key and unit)"),
    "ppo/grad_norm_actor": ("norm", "actor gradient norm before clipping"),
    "ppo/grad_norm_critic": ("norm", "critic gradient norm before clipping"),
    "ppo/forced_frac": ("fraction", "trainable rows with a single legal action"),
    "ppo/optimizer_steps": ("count", "optimizer steps this iteration"),
    "ppo/actor_optimizer_steps": ("count", "actor optimizer steps this iteration: batches holding at least one choice row (the critic steps on every batch)"),
    "ppo/policy_lag_mean": ("updates", "mean over the trainable rows of the updates between the actor that inferred a "
                            "row and the one it trains (rollout.overlap: 1 for rows inferred during the previous "
                            "update by its behaviour snapshot, 0 after; always 0 without overlap)"),
    "ppo/policy_lag_max": ("updates", "largest policy lag of a trainable row (0 or 1; never more)"),
    "throughput/overlap_rows_frac": ("ratio", "share of the trainable rows inferred while the previous update ran "
                                     "(rollout.overlap; 0 without it)"),
    "ppo/ratio_max_abs_dev": ("ratio", "max |ratio - 1| on the first minibatch (should be ~0)"),
    "ppo/ratio_atol": ("ratio", "the ratio tolerance of the precision the rollout and update forwards ran in (the coarser; "
                       "shared/alarms.py RATIO_ATOL: fp32 1e-4, tf32 5e-3, bf16 2e-2); ratio_invariant halts above "
                       "alarms.ratio_invariant_multiple x this"),
    "ppo/choice_rows": ("count", "trainable rows with more than one legal action"),
    # search and az (learner.algorithm = "alphazero"; services/learner/alphazero): absent from other rows
    "search/decisions": ("decisions", "learner choice decisions the rollouts searched this iteration (each one's target is trained on)"),
    "throughput/searched_decisions_per_second": ("decisions/s", "searched decisions / collection seconds (alphazero)"),
    "throughput/engine_steps_per_second": ("decisions/s", "(battle decisions + search simulation decisions) / collection seconds (alphazero): the engine's whole work"),
    "search/sim_steps": ("decisions", "engine decisions the rollouts stepped in search simulations this iteration, beside the battles' own (run/env_steps)"),
    "search/simulations_per_decision": ("count", "candidates simulated per searched decision"),
    "throughput/search_time_frac": ("ratio", "share of the rollouts' working time (stepping + search) spent in search (alphazero)"),
    "search/target_entropy": ("nats", "mean entropy of the search's improved policy over the searched rows"),
    "search/target_kl_prior": ("nats", "mean KL(target || prior) of the searched rows: how far the search moved the policy"),
    "search/changed_frac": ("fraction", "share of searched decisions whose move differs from the action the prior sampled"),
    "search/prior_noop_rate": ("fraction", "share of searched decisions where the live actor's own sample at inference (what the network plays without the search) was the no-op"),
    "search/move_noop_rate": ("fraction", "share of the same searched decisions where the search's move was the no-op"),
    "search/prior_agree_frac": ("fraction", "share of searched decisions whose move is the live actor's own sample at inference"),
    "search/critic_leaves": ("count", "search leaves the learner's critic valued this iteration (alphazero.leaf_value \"critic\"; absent under \"board\")"),
    "search/opponent_rows": ("count", "a network opponent's decisions in search simulations answered by the learner this iteration (alphazero.sim_opponent \"battle\"; absent when none)"),
    "search/refused": ("count", "searched slots of malformed rounds (not a learner choice row, illegal candidates): trained value-only"),
    # playout-cap randomisation (alphazero.full_search_share below 1; absent at 1) and the labels per hour
    "search/fast_decisions": ("decisions", "learner choice decisions the playout-cap coin gave the unsearched policy this iteration (the prior's own move, no simulation; value-only rows)"),
    "search/full_frac": ("fraction", "share of the learner choice decisions the playout-cap coin sent to a full search this iteration (its expectation: alphazero.full_search_share)"),
    "throughput/labels_per_hour": ("labels/h", "search/decisions (searched rows accepted with a policy target) x 3600 / time/iteration: the labels a searched learner gets per hour of wall time"),
    "throughput/replay_labels_per_hour": ("labels/h", "expit/labels_added x 3600 / time/iteration: the labels expert iteration's replay gains per hour of wall time"),
    "az/policy_loss": ("nats", "mean weighted cross-entropy of the actor against the search target per searched row, all epochs"),
    "az/kl_target": ("nats", "mean KL(target || actor) over the searched rows in the first epoch's forwards, before their step"),
    "az/value_loss": ("reward^2", "mean (V - z)^2 over every row forwarded, z the realized return-to-go"),
    "az/explained_variance": ("ratio", "1 - Var(z - V) / Var(z) of the first epoch's values"),
    "az/policy_rows": ("count", "rows with a search target (policy weight > 0)"),
    "az/optimizer_steps": ("count", "critic optimizer steps this iteration"),
    "az/actor_optimizer_steps": ("count", "actor optimizer steps this iteration (batches with a searched row)"),
    "az/grad_norm_actor": ("norm", "actor gradient norm before clipping, mean over steps"),
    "az/grad_norm_critic": ("norm", "critic gradient norm before clipping, mean over steps"),
    # dqn (learner.algorithm = "dqn"; services/learner/dqn/update.py): absent from a PPO row
    "dqn/td_error_abs": ("reward", "mean |TD error| over the (record, head) pairs the bootstrap masks include, all minibatches"),
    "dqn/q_abs_mean": ("reward", "mean |Q(s, a)| of the taken actions over records and heads"),
    "dqn/q_abs_max": ("reward", "largest |Q(s, a)| of the taken actions in the iteration's minibatches (q_diverging halts above alarms.dqn_q_abs_max)"),
    "dqn/td_bias": ("reward", "mean of Q(s, a) - y, y the Double DQN n-step target (positive: Q above its target)"),
    "dqn/overestimation": ("reward", "mean of Q(s, a) - G over drawn records that cannot bootstrap, G their realised n-step return; absent when none was drawn"),
    "dqn/head_disagreement": ("reward", "mean over records of the std over ensemble heads of Q(s, a) (0 with one head)"),
    "dqn/replay_age_mean": ("records", "mean insertions since a drawn record was stored"),
    "dqn/replay_size": ("records", "records the replay holds after the update"),
    "dqn/windows_added": ("records", "n-step windows this iteration completed and stored in the replay"),
    "dqn/priority_spread": ("ratio", "max / min stored replay priority after the update's write-backs"),
    "dqn/is_weight_min": ("ratio", "smallest importance weight drawn (1: no correction)"),
    "dqn/loss": ("reward^2", "mean masked, importance-weighted Huber TD loss per optimizer step"),
    "dqn/grad_norm": ("norm", "Q network gradient norm before clipping, mean over steps"),
    "dqn/target_syncs": ("count", "copies of the online network into the target network this iteration"),
    "dqn/optimizer_steps": ("count", "DQN optimizer steps this iteration"),
    "dqn/epsilon": ("fraction", "the behaviour policy's epsilon this iteration (dqn.epsilon_* schedule)"),
    "dqn/at_epsilon_floor": ("flag", "1 once epsilon has decayed to dqn.epsilon_floor"),
    "dqn/explore_frac": ("fraction", "share of the learner's choice rows acted by the uniform legal draw"),
    "dqn/greedy_noop_frac": ("fraction", "share of the greedy choice rows on which the behaviour policy waited (behaviour_dead warns at alarms.dqn_greedy_noop_frac)"),
    "dqn/heads_used": ("count", "distinct ensemble heads the iteration's episodes acted by (Thompson)"),
    "ppo/entropy_normalised": ("fraction", "mean over choice rows of H / ln max(n_legal, 2); 1 = uniform over the legal actions"),
    "ppo/update_magnitude_actor": ("norm", "L2 distance the actor's parameters moved over the update"),
    "ppo/update_magnitude_critic": ("norm", "L2 distance the critic's parameters moved over the update"),
    "ppo/adam_eps_floor_frac_actor": ("fraction", "share of actor parameters whose Adam sqrt(v_hat) is below adam_eps after the update"),
    "ppo/adam_eps_floor_frac_critic": ("fraction", "share of critic parameters whose Adam sqrt(v_hat) is below adam_eps after the update"),
    "ppo/value_clip_fraction": ("fraction", "rows where the clipped value branch was the larger (only with ppo.value_clipping)"),
    "ppo/reward_scale": ("reward", "what rewards were divided by (running std of discounted returns; 1 before two returns)"),
    "ppo/reward_clip_frac": ("fraction", "valid learner cells whose scaled reward was clipped to +-reward_clip (healthy: exactly 0)"),
    "ppo/return_std": ("reward", "running std (ddof 1) of raw discounted returns"),
    "ppo/lr_actor": ("1/step", "actor learning rate now"),
    "ppo/lr_critic": ("1/step", "critic learning rate now"),
    "ppo/lr_backoff_events": ("count", "learning-rate backoffs since the run began"),
    "ppo/lr_backoff_streak": ("count", "consecutive iterations with KL above the backoff threshold"),
    "ppo/ent_coef": ("coefficient", "entropy coefficient this iteration (its schedule's value)"),
    "ppo/ent_coef_noop": ("coefficient", "no-op entropy coefficient this iteration (its schedule's value)"),
    "ppo/advantage_mean": ("reward", "raw GAE advantage mean over trainable rows"),
    "ppo/return_mean": ("reward", "GAE return mean over trainable rows"),
    # health
    "health/rollouts": ("count", "rollouts in this iteration"),
    "health/rollouts_lost": ("count", "rollouts lost during this iteration (deadline missed or failed)"),
    "health/episodes_held": ("episodes", "finished seat-episodes the ladder has not acknowledged: held by the learner "
                             "while the ladder does not answer, sent when it does (healthy: exactly 0)"),
    "health/rows_invalid": ("timesteps", "learner cells of this iteration invalidated by lost rollouts"),
    "health/rows_invalid_frac": ("fraction", "rows_invalid / learner cells of the rectangle"),
    "health/trainable_rows": ("timesteps", "learner cells trained on this iteration"),
    "health/messages_refused": ("count", "malformed or unexpected messages refused this iteration"),
    "health/buffer_fill_frac": ("fraction", "rectangle cells written / cells the rectangle holds (exactly 1.0 when no rollout was lost)"),
    "health/obs_codec_clipped": ("count", "observation values clipped to fit the codec this iteration (healthy: exactly 0)"),
    "health/obs_codec_rounded": ("count", "observation values stored rounded in an integer plane this iteration (healthy: exactly 0)"),
    "health/nan_guard_trips": ("count", "non-finite losses, values or advantages caught this iteration"),
    "health/vram_driver_free_mb": ("MiB", "device memory the CUDA driver reports free after the update (CUDA learners only)"),
    "health/vram_peak_allocated_mb": ("MiB", "peak device memory torch allocated during the iteration (CUDA learners only)"),
    "health/vram_reserved_mb": ("MiB", "device memory torch's caching allocator holds after the update (CUDA learners only)"),
    "throughput/rollout_capacity_ratio": ("ratio", "time/update / time/collection: rollout capacity over update capacity (healthy >= 2)"),
    "health/illegal_action_rate": ("fraction", "learner actions the engine refused (deploy status > 0): a mask bug"),
    # seats held by frozen pool snapshots (services/learner/frozen.py)
    "time/frozen_inference": ("s", "resolving and inferring the frozen-snapshot seats' actions during collection"),
    "health/frozen_rows": ("timesteps", "frozen-snapshot seat rows answered this iteration (inferred or no-op; never trained)"),
    "health/frozen_noop_rows": ("timesteps", "frozen seat rows that played the no-op because their snapshot could not play (healthy: 0)"),
    "health/frozen_noop_rows_by_reason/{reason}": ("timesteps", "frozen seat rows played as the no-op, by why the snapshot could not play (not_found, refused, timeout, digest_mismatch, bad_weights, no_assignment, no_actors)"),
    "health/frozen_episodes_unreported": ("episodes", "seat-episodes kept out of the result log because a frozen seat in them played the no-op"),
    "health/frozen_loads": ("count", "frozen actors loaded from the checkpoint service this iteration (LRU misses)"),
    "health/frozen_hits": ("count", "frozen actor look-ups served from the LRU this iteration"),
    "health/frozen_load_failures": ("count", "frozen actor loads that failed this iteration (each snapshot at most once)"),
    "health/frozen_resident": ("count", "frozen actors held in the LRU at the end of the iteration (at most ladder.pool.max_resident_opponents + 2)"),
    # the ladder's status, asked once per iteration (services/learner/ladder_status.py). All absent when
    # the ladder did not answer; a number that does not exist yet is absent, never 0.
    "ladder/pool_size": ("count", "snapshots in the PFSP sampler (the pool's members; the archive keeps evicted ones)"),
    "ladder/pending_candidates": ("count", "candidate snapshots waiting for a gate"),
    "ladder/gates_run": ("count", "gate decisions applied to the pool since the run began (promote, admit_cycle, discard)"),
    "ladder/gates_passed": ("count", "gate decisions that promoted a new champion since the run began"),
    "ladder/consecutive_gate_failures": ("count", "gate decisions since the last promotion (gate_starved warns at 5)"),
    "ladder/champion_id": ("id", "the champion's member id, snap:<snapshot id>; absent before the first admission"),
    "ladder/champion_env_steps": ("decisions", "run/env_steps when the champion's snapshot was taken"),
    "ladder/champion_rating": ("Elo", "the champion's fitted rating (Bradley-Terry-Davidson over the eval games, scripted:noop = 0)"),
    "ladder/champion_rating_se": ("Elo", "standard error of the champion's rating"),
    "ladder/transitivity_residual": ("fraction", "share of pairs with >= min_pair_games eval games whose observed score is > 2 SE off the fit; absent when no pair has enough"),
    "ladder/pfsp_effective": ("flag", "1 when every PFSP prediction of the resident set came from the fit, 0 when some fell back to an even 0.5; absent while the pool is empty"),
    "ladder/rating/{member}": ("Elo", "fitted rating of one pool member (at most ladder.pool.pool_working_size members)"),
    "ladder/rating_se/{member}": ("Elo", "standard error of one pool member's rating"),
    # the standing strength measurement (services/ladder/strength.py), through the ladder's status:
    # every key absent (never 0 or 0.5) until a strength snapshot's games are all played.
    "strength/iteration": ("count", "learner iteration of the newest measured strength snapshot (evaluation.strength.every_iterations)"),
    "strength/env_steps": ("decisions", "run/env_steps when the newest measured strength snapshot was taken"),
    "strength/rating": ("Elo", "that snapshot's Bradley-Terry-Davidson rating against the scripted anchors, scripted:noop = 0"),
    "strength/rating_se": ("Elo", "standard error of strength/rating"),
    "strength/measured": ("count", "strength snapshots measured so far in the run"),
    "strength/pending": ("count", "strength snapshots waiting for (or in) play"),
    "strength/score/{anchor}": ("fraction", "that snapshot's score against one scripted anchor (a draw counts half)"),
    "strength/score_lo/{anchor}": ("fraction", "Wilson 95 % lower bound of strength/score"),
    "strength/score_hi/{anchor}": ("fraction", "Wilson 95 % upper bound of strength/score"),
    "strength/games/{anchor}": ("games", "games behind strength/score (both sides of each seed)"),
    # each promoted generation's strength (services/ladder/generation_strength.py), the newest measured
    # generation's, through the ladder's status: every key absent until one of its conditions is played.
    "expit/strength/generation": ("count", "the generation (index in the ladder's champion chain, 0 the run's first snapshot) the expit/strength/ keys measure"),
    "expit/strength/measured": ("count", "generations with at least one strength condition measured"),
    "expit/strength/pending": ("count", "generations with strength games still to play"),
    "expit/strength/score/{condition}": ("fraction", "that generation's score in one condition: unsearched/<anchor>, searched/<anchor> (the search simulates the anchor), searched_sim_<bot>/<anchor> and searched_sim_<bot>/previous (simulated as <bot>: no opponent model); a draw counts half"),
    "expit/strength/score_lo/{condition}": ("fraction", "Wilson 95 % lower bound of expit/strength/score"),
    "expit/strength/score_hi/{condition}": ("fraction", "Wilson 95 % upper bound of expit/strength/score"),
    "expit/strength/games/{condition}": ("games", "games behind expit/strength/score (both sides of each seed)"),
    "ladder/gate_score_lower_bound": ("fraction", "the last gate's Wilson 95 % lower bound of the candidate's score against the champion (passes at ladder.gate.champion_lower_bound); absent before a gate"),
}

SCHEMA: dict[str, tuple[str, str]] = merged(_CORE, "row_keys", "shared/metric_schema.py")
"""Every row key: RoyaleFleet's own, then each learner algorithm's ``row_keys`` in table order."""


def prometheus_name(key: str) -> tuple[str, dict[str, str]]:
    """(gauge name, labels) for a row key: ``env/win_rate_vs/scripted:noop`` ->
    (``royalefleet_learner_env_win_rate_vs``, {"opponent": "scripted:noop"})."""
    for family in SCHEMA:
        if "{" in family:
            prefix, label = family.split("{", 1)
            label = label.rstrip("}")
            if key.startswith(prefix) and key != prefix:
                rest = key[len(prefix):]
                base = prefix.rstrip("/")
                return "royalefleet_learner_" + re.sub(r"[^a-zA-Z0-9_]", "_", base), {label: rest}
    return "royalefleet_learner_" + re.sub(r"[^a-zA-Z0-9_]", "_", key), {}


def schema_key(key: str) -> str | None:
    """The SCHEMA entry a row key belongs to, or None."""
    if key in SCHEMA:
        return key
    for family in SCHEMA:
        if "{" in family:
            prefix = family.split("{", 1)[0]
            if key.startswith(prefix) and key != prefix:
                return family
    return None
