"""``royalefleet verify-resume``: prove on this machine that a stopped run continues exactly.

Trains K iterations straight; then, in another run folder, trains j < K iterations, stops
(writing a checkpoint), starts again (a fresh learner process resuming that checkpoint) and
finishes the K. Every metric row of the resumed iterations must equal the straight run's field
for field, except the wall-clock fields in ``TIMING_FIELDS`` and the fits of the evaluators'
games in ``EVALUATION_FIELDS``; ``run/state_digest`` (a hash over weights, optimizer moments and
update state) is among the compared fields. The pool is part of the comparison: a gate that
admits a member at a different iteration in the two runs (gates are evaluator games too) shows
as a difference, so verify-resume is a proof for runs whose pool moves only by the learner's own
submissions (the first candidate is admitted free), as in the tiny profile.

Episodes in flight at the stop are part of the promise: the checkpoint holds every battle's
exact state at the boundary (services/learner/battle_states.py), and the resumed learner hands
each back to the rollout that now holds that battle id, so the episode continues from the
decision it had reached. The first resumed row carries ``resume/`` keys (battles restored,
refused, unheld, missing), which the straight run has not; they are left out of the comparison
and said when a difference is found, since a refused or missing state restarts its episode.
"""

from __future__ import annotations

import json
import os
import tempfile

import msgspec

from shared.config import RunConfig
from shared.run_dir import RunDir

TIMING_FIELDS = ("time/", "throughput/", "run/wall_seconds")
"""Row keys excluded from the comparison: wall-clock measurements, different on every run."""

EVALUATION_FIELDS = ("ladder/champion_rating", "ladder/rating/", "ladder/rating_se/", "ladder/transitivity_residual",
                     "ladder/gate_score_lower_bound", "strength/", "expit/strength/")
"""Row keys fitted from the evaluators' games (ratings, the gate's bound, strength scores, each
generation's strength: services/ladder/generation_strength.py): the
evaluators play them beside the run on their own clock, so how many have been fitted when the
learner asks the ladder (once per iteration) depends on wall time, and a stopped-and-resumed
run has had more of it. Nothing the learner trains on reads them."""

RESUME_FIELDS = ("resume/",)
"""Row keys that describe the resume itself (battles restored, refused, unheld): only the first
row after a resume has them, and the straight run has none."""


def _compare(a: list[dict], b: list[dict], first: int) -> list[str]:
    by_a = {r["run/iteration"]: r for r in a}
    by_b = {r["run/iteration"]: r for r in b}
    problems = []
    for it in sorted(by_a):
        if it < first:
            continue
        ra, rb = by_a[it], by_b.get(it)
        if rb is None:
            problems.append(f"iteration {it}: missing from the resumed run")
            continue
        keys = sorted(k for k in set(ra) | set(rb) if not k.startswith(TIMING_FIELDS + EVALUATION_FIELDS + RESUME_FIELDS))
        diff = [k for k in keys if ra.get(k) != rb.get(k)]
        if diff:
            shown = ", ".join(f"{k} {ra.get(k)!r} != {rb.get(k)!r}" for k in diff[:6])
            problems.append(f"iteration {it}: {len(diff)} field(s) differ: {shown}" + (" ..." if len(diff) > 6 else ""))
    return problems


def _rows(path: str) -> list[dict]:
    rows: dict[int, dict] = {}
    with open(path) as fh:
        for line in fh:
            r = json.loads(line)
            rows[r["run/iteration"]] = r  # a rewritten iteration: the later row counts
    return [rows[k] for k in sorted(rows)]


def verify_resume(cfg: RunConfig, *, iterations: int, split: int, rollouts: int = 2, say=print,
                  perturb: str = "", keep_dir: str | None = None) -> list[str]:
    """Returns the differences found (empty: the resume is exact)."""
    from royalefleet.launcher import Stack, on_free_ports

    if not 0 < split < iterations:
        raise ValueError(f"split {split} must be between 0 and iterations {iterations}")
    tmp = keep_dir or tempfile.mkdtemp(prefix="royalefleet-verify-resume-")
    services = on_free_ports(cfg.services)
    quiet = lambda s: say("  " + s) if s.startswith(("it ", "learner: resumed", "learner: PERTURBED")) else None  # noqa: E731

    def run(name: str, n: int, extra_env: dict | None = None) -> None:
        c = msgspec.structs.replace(cfg, runs_dir=tmp, run_name=name, services=services)
        code = Stack(c, iterations=n, rollouts=rollouts, say=quiet, learner_env=extra_env).run()
        if code != 0:
            raise SystemExit(f"verify-resume: the {name} run exited with code {code}; logs in {tmp}/{name}/logs")

    say(f"verify-resume: {iterations} iterations straight ({rollouts} rollouts) ...")
    run("straight", iterations)
    say(f"verify-resume: {split} iteration(s), stop, resume in a fresh learner, {iterations - split} more ...")
    run("split", split)
    run("split", iterations, {"ROYALEFLEET_PERTURB_RESUME": perturb} if perturb else None)
    straight = _rows(RunDir(os.path.join(tmp, "straight")).metrics)
    split_rows = _rows(RunDir(os.path.join(tmp, "split")).metrics)
    problems = _compare(straight, split_rows, 1)
    if len(straight) != iterations:
        problems.insert(0, f"the straight run wrote {len(straight)} rows, expected {iterations}")
    if problems:
        say(f"verify-resume: NOT exact; first difference at {problems[0]}")
        for line in problems[1:]:
            say("  " + line)
        resumed = next((r for r in split_rows if any(k.startswith(RESUME_FIELDS) for k in r)), {})
        afresh = sum(resumed.get(f"resume/battles_{k}", 0) for k in ("refused", "missing"))
        if afresh:
            say(f"  note: {afresh} battle(s) had no usable recorded state at the split (resume/battles_refused, "
                "resume/battles_missing in its first row) and began their episodes afresh; the learner log says why")
    else:
        say(f"verify-resume: exact — iterations {split + 1}..{iterations} of the resumed run equal the straight "
            f"run's, {len(straight[-1]) if straight else 0} fields a row (timing fields excluded), "
            f"final state {straight[-1]['run/state_digest'] if straight else '-'}")
    return problems
