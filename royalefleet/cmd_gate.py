"""``royalefleet gate CANDIDATE [RUN]``: re-run a logged gate decision and compare.

Reads ``<runs_dir>/<run>/ladder/gates/<candidate>.json`` (services/ladder/gate_runner.py
``GateRecord``), plays every job it lists again in this process (same job ids, so the same
action streams; same seeds of the same seed set; the snapshots from the run's store), decides
again with the same path the ladder used (``gate_runner.decide_from_scores``, with the record's
anchor record, fitted predictions and gate settings), and compares the verdict and every
condition's numbers with the record. Prints ``match`` or ``MISMATCH`` per condition; exits 1
on any mismatch, 2 when the record or a snapshot cannot be read.
"""

from __future__ import annotations

import argparse
import sys

from royalefleet.players import LocalPlayers, normalise
from royalefleet.run_options import add_run_argument, add_run_options, run_config

FIELDS = ("passed", "skipped", "n", "observed", "bound", "reference")


def add_parser(subparsers) -> argparse.ArgumentParser:
    gp = subparsers.add_parser(
        "gate", help="re-run a logged gate decision from the stored snapshots and seeds, and compare",
        description="Replay every game of a logged gate decision and check that each condition's numbers and "
        "the verdict come out the same. Exit 1 on a mismatch.")
    gp.add_argument("candidate", help="the candidate: snap:<snapshot_id> or the bare id")
    add_run_argument(gp)
    add_run_options(gp)
    gp.set_defaults(func=cmd_gate)
    return gp


def compare(logged, rerun) -> list[str]:
    """One line per condition and one for the verdict, each starting ``match`` or ``MISMATCH``."""
    lines = []
    ok = logged.verdict == rerun.verdict
    lines.append(f"{'match' if ok else 'MISMATCH'}  verdict: logged {logged.verdict}, re-run {rerun.verdict}")
    old = {c.name: c for c in logged.conditions}
    new = {c.name: c for c in rerun.conditions}
    for name in list(old) + [n for n in new if n not in old]:
        a, b = old.get(name), new.get(name)
        if a is None or b is None:
            lines.append(f"MISMATCH  {name}: {'only in the re-run' if a is None else 'missing from the re-run'}")
            continue
        diffs = [f"{f} {getattr(a, f)!r} -> {getattr(b, f)!r}" for f in FIELDS if getattr(a, f) != getattr(b, f)]
        if diffs:
            lines.append(f"MISMATCH  {name}: " + "; ".join(diffs))
        else:
            nums = ", ".join(f"{f} {getattr(a, f)}" for f in ("n", "observed", "bound", "reference")
                             if getattr(a, f) is not None)
            lines.append(f"match     {name}: {'skipped' if a.skipped else 'passed' if a.passed else 'failed'}"
                         + (f" ({nums})" if nums else ""))
    return lines


def cmd_gate(args, out=None) -> int:
    from services.evaluator.games import play_job
    from services.ladder.gate_runner import decide_from_scores, gate_record_path, read_gate_record, scores_by_condition
    from shared.envs import build_env
    from shared.evaluation import eval_env_config, eval_seed_set, seed_set_hash

    out = out or sys.stdout
    cfg = run_config(args, must_exist=True)
    candidate = normalise(args.candidate)
    path = gate_record_path(cfg.runs_dir, cfg.run_name, candidate)
    try:
        rec = read_gate_record(path)
    except FileNotFoundError:
        print(f"royalefleet gate: no decision record {path} (is {candidate} a candidate of run "
              f"{cfg.run_name!r}? RUN or --run-name names the run)", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"royalefleet gate: {exc}", file=sys.stderr)
        return 2
    seed_set = eval_seed_set(rec.master_seed, rec.eval_seed_count)
    if seed_set_hash(seed_set) != rec.eval_seed_set_hash:
        print(f"royalefleet gate: the record's seed set hashes to {rec.eval_seed_set_hash}, master seed "
              f"{rec.master_seed} with {rec.eval_seed_count} seeds gives {seed_set_hash(seed_set)}", file=sys.stderr)
        return 1
    players = LocalPlayers(cfg)
    env = build_env(eval_env_config(cfg.env))
    records = {}
    out.write(f"re-running the gate of {rec.candidate} vs {rec.champion}: {len(rec.jobs)} jobs, "
              f"{sum(2 * len(j.seeds) for j in rec.jobs)} games\n")
    for k, job in enumerate(rec.jobs, 1):
        try:
            loaded = {p: players.get(p) for p in (job.a, job.b)}
        except (ValueError, OSError) as exc:
            print(f"royalefleet gate: {exc}", file=sys.stderr)
            return 2
        records[job.job_id] = play_job(env, loaded, job=job.job_id, a=job.a, b=job.b, seeds=job.seeds,
                                       seed_set=seed_set, master_seed=rec.master_seed,
                                       decision_ms=cfg.env.decision_ms)
        out.write(f"  job {job.job_id} ({job.condition}) done, {k}/{len(rec.jobs)}\n")
        out.flush()
    decision = decide_from_scores(
        scores_by_condition(rec.jobs, records), candidate=rec.candidate, champion=rec.champion,
        champion_anchor_record=rec.champion_anchor_record, champion_predicted=rec.champion_predicted,
        stratified_members=rec.stratified_members, gate_cfg=rec.gate, master_seed=rec.master_seed,
        settled_after=rec.settled_after)
    lines = compare(rec.decision, decision)
    out.write("\n".join(lines) + "\n")
    bad = sum(line.startswith("MISMATCH") for line in lines)
    out.write(f"{'every number matches' if not bad else f'{bad} mismatch(es)'}: {path}\n")
    return 1 if bad else 0
