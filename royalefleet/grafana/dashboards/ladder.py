"""The ladder dashboard (`grafana/dashboards/ladder.json`): one function a row, each giving that
row's panels; ``ROWS`` puts them in order. A new row: a function here and its line in ``ROWS``;
a new panel: one more ``ts(...)`` in its row's list (``royalefleet.grafana.panels.ts``)."""

from __future__ import annotations

from royalefleet.grafana.common import learner as L
from royalefleet.grafana.panels import Row, dashboard, ts

UID = "royalefleet-ladder"
TITLE = "royalefleet: ladder"
DESCRIPTION = "Ratings with standard errors, the pool, the gate and its evaluators."


def ratings() -> list[dict]:
    """Bradley-Terry-Davidson ratings with their intervals and the transitivity residual."""
    rating, se = L("ladder/rating/{member}"), L("ladder/rating_se/{member}")
    return [
        ts("Ratings with 95 % intervals (Elo)", [
            (rating, "{{member}}"),
            (f"{rating} - 1.96 * {se}", "{{member}} lower"),
            (f"{rating} + 1.96 * {se}", "{{member}} upper"),
        ], description="Bradley-Terry-Davidson fit over the whole result log, scripted:noop pinned at 0.", width=24),
        ts("Rating standard errors (Elo)", [(se, "{{member}}")]),
        ts("Transitivity residual", [(L("ladder/transitivity_residual"), "residual")], unit="percentunit",
           description="Above 0.1 a scalar rating is not meaningful (transitivity warns)."),
    ]


def pool() -> list[dict]:
    """The champion, the pool, battles by role, win rates against each opponent, the ladder service."""
    return [
        ts("Champion", [("royalefleet_ladder_champion_info", "{{member}}"),
                        ("royalefleet_ladder_champion_env_steps", "env steps")], kind="stat",
           description="The current champion (its member id) and the env steps its snapshot was taken at."),
        ts("Pool size", [(L("ladder/pool_size"), "members")]),
        ts("Battles by role (last plan)", [("royalefleet_ladder_role_battles", "{{role}}"),
                                           ("royalefleet_ladder_pool_fallback_battles", "pool battles on a scripted opponent")]),
        ts("Win rate against each opponent", [(L("env/win_rate_vs/{opponent}"), "{{opponent}}"),
                                              (L("env/win_rate_pool"), "pool snapshots (all)")], unit="percentunit"),
        ts("Ladder service", [("rate(royalefleet_ladder_plans_served_total[5m])", "plans/s"),
                              ("rate(royalefleet_ladder_episodes_recorded_total[5m])", "episodes recorded/s"),
                              ("rate(royalefleet_ladder_eval_games_recorded_total[5m])", "evaluation games/s"),
                              ("sum by (reason) (rate(royalefleet_ladder_messages_refused_total[5m]))", "refused: {{reason}}")]),
    ]


def gate() -> list[dict]:
    """Gate failures, the last gate's lower bound, gates run and passed."""
    return [
        ts("Consecutive gate failures", [(L("ladder/consecutive_gate_failures"), "failures")],
           description="gate_starved warns at 5."),
        ts("Last gate: lower bound against the champion", [(L("ladder/gate_score_lower_bound"), "Wilson 95 % lower bound")],
           unit="percentunit", description="A candidate passes at 0.52 (ladder.gate.champion_lower_bound)."),
        ts("Gates run and passed", [(L("ladder/gates_run"), "run"), (L("ladder/gates_passed"), "passed")]),
    ]


def evaluators() -> list[dict]:
    """Evaluation games and jobs, evaluators up and busy."""
    return [
        ts("Evaluation games and jobs", [
            ("sum(rate(royalefleet_evaluator_games_played_total[5m]))", "games played/s (all evaluators)"),
            ("sum(rate(royalefleet_evaluator_jobs_reported_total[5m]))", "jobs reported/s"),
            ("sum by (reason) (rate(royalefleet_evaluator_jobs_failed_total[5m]))", "jobs given up/s: {{reason}}"),
            ("rate(royalefleet_ladder_eval_games_recorded_total[5m])", "games recorded/s (ladder)"),
        ], description="Games an evaluator played against games the ladder wrote: played but not recorded are "
                       "games of a job cut short or reported twice (a job past evaluation.job_deadline_s is "
                       "handed out again)."),
        ts("Evaluators", [
            ('count(up{job="evaluator"} == 1)', "scraped and up"),
            ('count(up{job="evaluator"} == 0)', "scraped and down"),
            ("sum(royalefleet_evaluator_busy)", "playing a job"),
            ("sum(rate(royalefleet_evaluator_snapshots_loaded_total[5m]))", "snapshots loaded/s"),
        ], description="Idle evaluators ask the ladder for a job every few seconds; all busy while a gate "
                       "waits means the gate is short of evaluators (FLEET_EVALUATORS, local.evaluators)."),
        ts("Search at play (evaluators)", [
            ("sum(rate(royalefleet_evaluator_search_decisions_total[5m]))", "searched decisions/s"),
            ("sum(rate(royalefleet_evaluator_search_simulations_total[5m])) / "
             "sum(rate(royalefleet_evaluator_search_decisions_total[5m]))", "simulations per searched decision"),
            ("sum(rate(royalefleet_evaluator_search_seconds_total[5m]))", "evaluator seconds/s in search"),
        ], description="Only players with a search budget search (snap:<id>+search:N, evaluation.strength.search; "
                       "docs/search.md). Seconds/s in search near the evaluator count means the evaluators do "
                       "little else."),
    ]


def strength() -> list[dict]:
    """The standing strength measurement against the scripted anchors (services/ladder/strength.py)."""
    score, lo, hi = L("strength/score/{anchor}"), L("strength/score_lo/{anchor}"), L("strength/score_hi/{anchor}")
    rating, se = L("strength/rating"), L("strength/rating_se")
    return [
        ts("Strength: score against each scripted anchor (Wilson 95 %)", [
            (score, "{{anchor}}"), (lo, "{{anchor}} lower"), (hi, "{{anchor}} upper"),
        ], unit="percentunit", width=24,
           description="The newest strength snapshot (the learner's actor every evaluation.strength.every_iterations) "
                       "against each anchor, a draw counting half; no line until the first snapshot is measured."),
        ts("Strength: rating with 95 % interval (Elo, scripted:noop = 0)", [
            (rating, "rating"), (f"{rating} - 1.96 * {se}", "lower"), (f"{rating} + 1.96 * {se}", "upper"),
        ], description="One Bradley-Terry-Davidson fit of every measured strength snapshot's games."),
        ts("Strength: measurements", [(L("strength/iteration"), "iteration measured"),
                                      (L("strength/measured"), "snapshots measured"),
                                      (L("strength/pending"), "snapshots pending")],
           description="Pending grows when the evaluators cannot keep up (a waiting snapshot is then replaced by "
                       "the newer one)."),
    ]


def generations() -> list[dict]:
    """Each promoted generation's strength, unsearched and searched (services/ladder/generation_strength.py)."""
    score = L("expit/strength/score/{condition}")
    return [
        ts("Strength by generation: unsearched and searched (ladder)", [
            ("royalefleet_ladder_generation_strength_score", "generation {{generation}} {{condition}}"),
        ], unit="percentunit", width=24,
           description="Every measured generation (0: the run's first snapshot, then each champion a gate promoted) "
                       "in each condition: unsearched/<anchor>, searched/<anchor> (the search simulates the anchor), "
                       "searched_sim_<bot>/<anchor> and searched_sim_<bot>/previous (the search simulates the other "
                       "seat as <bot>, not the opponent: strength that is not an opponent model). A draw counts "
                       "half; evaluation.strength.generations."),
        ts("Newest generation: score with Wilson 95 % (learner row)", [
            (score, "{{condition}}"),
            (L("expit/strength/score_lo/{condition}"), "{{condition}} lower"),
            (L("expit/strength/score_hi/{condition}"), "{{condition}} upper"),
        ], unit="percentunit", description="The expit/strength/ keys: the newest generation with a condition played."),
        ts("Generations measured", [(L("expit/strength/generation"), "generation"),
                                    (L("expit/strength/measured"), "measured"),
                                    ("royalefleet_ladder_generation_strength_pending", "pending")]),
    ]


ROWS = [("Ratings", ratings), ("Pool", pool), ("Gate", gate), ("Evaluators", evaluators), ("Strength", strength),
        ("Strength by generation", generations)]
"""(row title, the function giving its panels), top to bottom. Panel ids follow this order,
so a row added at the end leaves every existing id (and the alert rules' panel link) alone."""


def rows() -> list[Row]:
    return [(title, panels()) for title, panels in ROWS]


def build() -> dict:
    """The dashboard's JSON model."""
    return dashboard(UID, TITLE, DESCRIPTION, rows())
