"""``royalefleet replay RUN EPISODE``: re-simulate one episode of a run's result log with the same
players, check it against what was logged (and against its recorded trace when the run kept one),
and write it as a RoyaleGym trace plus its HTML page.

    royalefleet replay myrun 1234                      # line 1234 of runs/myrun/ladder/results.jsonl
    royalefleet replay myrun --battle 3 --ordinal 1 --job 17

EPISODE is a line number of the result log (1-based, one line per seat). ``--battle B --ordinal K``
picks by the record's battle and ordinal instead (for an evaluation game: the seed index and
the side; ``--job`` narrows to one job, ``--seat`` to one seat); several matches are listed.

What can be re-simulated, and what is said instead:

* An **evaluation game** (``role`` eval: a gate's or a champion's strength games, and
  ``royalefleet eval``'s) is a pure function of (job, seed index, side) and the two players
  (services/evaluator/games.py): it is played again with the snapshots read from the run's
  snapshot store and the scripted anchors, and must give the logged outcome, crowns, steps,
  ticks and cards of both seats. When ``<run>/replays/`` holds a trace of that game (the
  evaluators record some, ``evaluation.replays_per_gate``), the replayed trace is compared with
  it decision by decision and the FIRST diverging decision is printed (its tick, both seats'
  commands there, the state hash), and the recorded trace is also re-simulated on this engine
  (``royalegym.replay.verify_trace``). A difference is never hidden: exit 1.
* A **training episode** (roles mirror, pool, scripted) is re-simulated from its battle and
  ordinal with the players its assignment seated (royalefleet/replay_training.py): the learner
  seat with the weights of each iteration its decisions were taken in (the checkpoint of the
  iteration before, matched to the record by the actor's digest; iteration 1's initial weights
  are rebuilt), a pool seat with its snapshot, a scripted seat on its stream; each inferred
  decision in a batch of its recorded size at its recorded index, on the same uniform of the
  same named stream. Every inferred decision's action must equal the record's (the learner
  stamps them, ``EpisodeRecord.provenance``), and the outcome, steps, ticks, crowns and cards of
  both seats the logged ones; the first diverging decision is printed. An episode whose
  weights are not kept (no checkpoint of that iteration, an iteration rolled back by a resume,
  another device class) or whose record carries no provenance (a log written before it existed)
  is refused, naming each seat, player and iteration that cannot be reproduced. Other weights
  are never stood in. Exit 2.

Exit 0: verified; 1: a difference (printed); 2: the episode cannot be replayed (said why).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from royalefleet.run_options import add_run_argument, add_run_options, run_config


def add_parser(subparsers) -> argparse.ArgumentParser:
    rp = subparsers.add_parser(
        "replay", help="re-simulate an episode of the result log with the same players, verify it, write it as HTML",
        description="Re-simulate one evaluation game of a run's result log from its job, seed and side with the "
        "same players, check the logged records (and the recorded trace when there is one), and write the trace "
        "and its HTML page. A training episode is replayed with the learner's weights of each iteration it spanned "
        "(from the checkpoints) and checked decision by decision, or refused naming the players that cannot be "
        "reproduced (docs/watching.md). Exit 0 verified, 1 a difference (the first diverging decision is printed), "
        "2 not replayable.")
    add_run_argument(rp)
    rp.add_argument("episode", nargs="?", type=int, help="line number in <run>/ladder/results.jsonl (1-based); "
                    "with --run-name, RUN can be left out: `replay --run-name default 3`")
    rp.add_argument("--battle", type=int, help="pick by the record's battle (an evaluation game's seed index)")
    rp.add_argument("--ordinal", type=int, help="pick by the record's ordinal (an evaluation game's side)")
    rp.add_argument("--job", type=int, help="with --battle/--ordinal: only this evaluation job")
    rp.add_argument("--seat", choices=("blue", "red"), help="with --battle/--ordinal: only this seat")
    rp.add_argument("--out", type=Path, help="folder for the trace and page (default <run>/replays/replayed)")
    rp.add_argument("--per-decision", action="store_true",
                    help="record one frame per decision instead of per engine tick (10x smaller)")
    add_run_options(rp)
    rp.set_defaults(func=cmd_replay)
    return rp


# ------------------------------------------------------------------------- comparing traces


def _commands(step) -> str:
    if not step.commands:
        return "no play"
    seats = {0: "blue", 1: "red"}
    return "; ".join(f"{seats.get(c.team, c.team)} slot {c.hand_slot} at ({c.x}, {c.y}) status {s}"
                     for c, s in zip(step.commands, step.statuses))


def _hashes_by_tick(trace) -> dict[int, str]:
    out: dict[int, str] = {}
    for f in trace.frames:
        out.setdefault(f.tick, f.state_hash)
    return out


def first_divergence(recorded, replayed) -> str | None:
    """Where two traces of one game first differ, as one line, or None when every decision and
    every state hash they both recorded agree.

    Decision ``i`` is ``trace.steps[i]`` (one ``env.step``). Checked in order: the starting
    state (the seed and the decks), then for each decision its tick, the commands both seats
    sent and the engine's statuses, then the state hash after it (at the next decision's tick,
    or at the end); finally the number of decisions and the result."""
    h0, h1 = _hashes_by_tick(recorded), _hashes_by_tick(replayed)
    if recorded.header.seed != replayed.header.seed or (recorded.frames and replayed.frames
                                                        and recorded.frames[0].state_hash != replayed.frames[0].state_hash):
        return (f"decision 0 (tick 0): the battles start from different states: engine seed {recorded.header.seed} "
                f"recorded, {replayed.header.seed} replayed; state hash {recorded.frames[0].state_hash} recorded, "
                f"{replayed.frames[0].state_hash} replayed")
    for i, (s0, s1) in enumerate(zip(recorded.steps, replayed.steps)):
        if s0.tick != s1.tick:
            return f"decision {i}: at tick {s0.tick} recorded, tick {s1.tick} replayed"
        if list(s0.commands) != list(s1.commands) or list(s0.statuses) != list(s1.statuses):
            return f"decision {i} (tick {s0.tick}): recorded {_commands(s0)}; replayed {_commands(s1)}"
        after = recorded.steps[i + 1].tick if i + 1 < len(recorded.steps) else None
        if after is not None and after in h0 and after in h1 and h0[after] != h1[after]:
            return (f"decision {i} (tick {s0.tick}): the same commands led to state hash {h0[after]} recorded, "
                    f"{h1[after]} replayed at tick {after} (another engine build?)")
    if len(recorded.steps) != len(replayed.steps):
        n = min(len(recorded.steps), len(replayed.steps))
        return (f"decision {n}: the recorded game has {len(recorded.steps)} decisions, the replay "
                f"{len(replayed.steps)}")
    r0, r1 = recorded.result, replayed.result
    if (r0 is None) != (r1 is None) or (r0 is not None and r0.final_hash != r1.final_hash):
        return "the end: the final states differ"
    return None


# ------------------------------------------------------------------------- picking the episode


def pick(lines, args) -> tuple[int, object] | str:
    """(line number, ResultLine) of the chosen episode, or the text saying why none (or which)."""
    if args.episode is not None:
        if args.battle is not None or args.ordinal is not None:
            return "give EPISODE or --battle/--ordinal, not both"
        if not 1 <= args.episode <= len(lines):
            return f"EPISODE {args.episode}: the result log has lines 1..{len(lines)}"
        return args.episode, lines[args.episode - 1]
    if args.battle is None or args.ordinal is None:
        return "name the episode: its line number in the result log, or --battle B --ordinal K"
    found = [(n, line) for n, line in enumerate(lines, start=1)
             if line.record.battle == args.battle and line.record.ordinal == args.ordinal
             and (args.job is None or (line.record.role == "eval" and line.record.iteration == args.job))
             and (args.seat is None or line.record.seat == args.seat)]
    if not found:
        return f"no record with battle {args.battle} ordinal {args.ordinal}" + (
            f" in job {args.job}" if args.job is not None else "")
    games = {(line.record.role == "eval", line.record.iteration, line.record.battle, line.record.ordinal)
             for _, line in found}
    if len(games) > 1:
        listed = "\n".join(f"  line {n}: {_describe(line.record)}" for n, line in found[:20])
        return (f"{len(found)} records have battle {args.battle} ordinal {args.ordinal}; give the line number "
                f"(or --job for an evaluation game):\n{listed}")
    return found[0]


def _describe(r) -> str:
    what = f"job {r.iteration}" if r.role == "eval" else f"iteration {r.iteration}"
    return (f"{r.role} {what}, battle {r.battle} ordinal {r.ordinal}, {r.seat} {r.player} vs {r.opponent}, "
            f"outcome {r.outcome:+d}, {r.episode_steps} decisions")


# ------------------------------------------------------------------------- the command


def replay_training_episode(cfg, lines, number: int, rec, args, out, err) -> int:
    """A training episode (royalefleet/replay_training.py): replayed, verified and written, or
    refused naming the players and iterations that cannot be reproduced."""
    from royalegym.replay import ReplayRecorder

    from royalefleet.replay_training import NotReplayable, replay
    from shared.replays import replays_dir, write_game

    root = Path(cfg.runs_dir) / cfg.run_name
    recorder = ReplayRecorder(frame_every_tick=not args.per_decision)
    try:
        problems = replay(cfg, lines, rec, root, recorder)
    except NotReplayable as exc:
        print(f"royalefleet replay: line {number}: {exc}", file=err)
        return 2
    blue, red = (rec.player, rec.opponent) if rec.seat == "blue" else (rec.opponent, rec.player)
    target = args.out or replays_dir(cfg.runs_dir, cfg.run_name) / "replayed"
    stem = f"it{rec.iteration}-battle{rec.battle}-ordinal{rec.ordinal}"
    try:
        trace_path, html = write_game(target, stem, recorder.trace,
                                      title=f"replay: {blue} (blue) vs {red} (red), {rec.role} episode, battle "
                                      f"{rec.battle} ordinal {rec.ordinal}, ended in iteration {rec.iteration}")
    except OSError as exc:
        print(f"royalefleet replay: cannot write to {target}: {exc}", file=err)
        return 2
    out.write(f"wrote {trace_path} and {html}\n")
    if problems:
        out.write("\n".join(f"DIFFERS  {p}" for p in problems) + "\n")
        out.write(f"replay of line {number} differs from the logged records (first diverging decision first)\n")
        return 1
    out.write(f"verified: line {number} replays to the logged records, every inferred decision's action "
              f"included ({len(recorder.trace.steps)} decisions)\n")
    return 0

COMPARED = ("outcome", "episode_steps", "episode_ticks", "own_crowns", "enemy_crowns", "cards_played")


def episode_as_run(args) -> None:
    """``replay --run-name R 3``: argparse gives the lone positional 3 to RUN; with --run-name
    naming the run, a whole-number RUN and no episode is the episode."""
    if args.run_name and args.episode is None and args.run is not None and args.run.isdigit():
        args.episode, args.run = int(args.run), None


def cmd_replay(args, out=None) -> int:
    from royalegym.replay import ReplayRecorder, load_trace, verify_trace

    from royalefleet.players import LocalPlayers
    from services.evaluator.games import GameError, decision_cap, play_game
    from services.ladder.results import ResultLog
    from shared.envs import build_env
    from shared.evaluation import EVAL_ROLE, eval_env_config, eval_seed_set
    from shared.replays import read_index, replays_dir, write_game

    out = out or sys.stdout
    err = sys.stderr
    episode_as_run(args)
    cfg = run_config(args, must_exist=True)
    log = ResultLog.for_run(cfg.runs_dir, cfg.run_name)
    if not log.path.exists():
        print(f"royalefleet replay: run {cfg.run_name!r} has no result log at {log.path}", file=err)
        return 2
    lines = log.read().lines
    chosen = pick(lines, args)
    if isinstance(chosen, str):
        print(f"royalefleet replay: {chosen}", file=err)
        return 2
    number, line = chosen
    rec = line.record
    out.write(f"line {number}: {_describe(rec)}\n")
    if rec.role != EVAL_ROLE:
        return replay_training_episode(cfg, lines, number, rec, args, out, err)

    job, seed_index, side = rec.iteration, rec.battle, rec.ordinal
    blue, red = (rec.player, rec.opponent) if rec.seat == "blue" else (rec.opponent, rec.player)
    a, b = (blue, red) if side == 0 else (red, blue)
    count = cfg.ladder.pool.eval_seed_count
    seed_set = eval_seed_set(cfg.master_seed, count)
    if not 0 <= seed_index < count:
        print(f"royalefleet replay: seed index {seed_index} is outside this config's evaluation seed set of {count} "
              "(ladder.pool.eval_seed_count): use the run's own config", file=err)
        return 2
    players = LocalPlayers(cfg)
    loaded, missing = {}, []
    for p in dict.fromkeys((a, b)):
        try:
            loaded[p] = players.get(p)
        except (ValueError, OSError) as exc:
            missing.append(f"{p}: {exc}")
    if missing:
        print("royalefleet replay: cannot reproduce " + "; ".join(missing) + " (no other weights are used)", file=err)
        return 2
    recorder = ReplayRecorder(frame_every_tick=not args.per_decision)
    env = build_env(eval_env_config(cfg.env))
    try:
        records = play_game(env, loaded[a], loaded[b], job=job, seed=seed_index, side=side,
                            env_seed=int(seed_set[seed_index]), master_seed=cfg.master_seed,
                            max_decisions=decision_cap(cfg.env.decision_ms), recorder=recorder)
    except GameError as exc:
        print(f"royalefleet replay: {exc}", file=err)
        return 1
    problems = []
    logged = {line.record.seat: line.record for line in lines
              if line.record.role == EVAL_ROLE and line.record.iteration == job
              and line.record.battle == seed_index and line.record.ordinal == side}
    for r in records:
        want = logged.get(r.seat)
        if want is None:
            continue
        diffs = [f"{f} {getattr(want, f)} logged, {getattr(r, f)} replayed" for f in COMPARED
                 if getattr(want, f) != getattr(r, f)]
        if diffs:
            problems.append(f"{r.seat} ({r.player}): " + "; ".join(diffs))
    folder = replays_dir(cfg.runs_dir, cfg.run_name)
    stem = f"job{job}-seed{seed_index}-side{side}"
    recorded = None
    try:
        entry = next((e for e in read_index(folder).entries if e.id == stem), None)
        if entry is not None:
            recorded = load_trace(Path(cfg.runs_dir) / cfg.run_name / entry.trace)
    except (OSError, ValueError, msgspec.DecodeError) as exc:
        problems.append(f"the recorded trace of this game cannot be read: {exc}")
    if recorded is not None:
        where = first_divergence(recorded, recorder.trace)
        if where is not None:
            problems.append(f"first divergence from the recorded trace: {where}")
        from royalegym import RustEngine

        engine_problems = verify_trace(recorded, RustEngine())
        if engine_problems:
            problems.append(f"the recorded trace does not re-simulate on this engine: {engine_problems[0]}"
                            + (f" (+{len(engine_problems) - 1} more)" if len(engine_problems) > 1 else ""))
    target = args.out or folder / "replayed"
    try:
        trace_path, html = write_game(target, stem, recorder.trace,
                                      title=f"replay: {blue} (blue) vs {red} (red), job {job}, seed {seed_index}")
    except OSError as exc:
        print(f"royalefleet replay: cannot write to {target}: {exc}", file=err)
        return 2
    finally:
        env.close()
    out.write(f"wrote {trace_path} and {html}\n")
    checked = "the logged records" + (" and the recorded trace" if recorded is not None else
                                      " (the run kept no trace of this game)")
    if problems:
        out.write("\n".join(f"DIFFERS  {p}" for p in problems) + "\n")
        out.write(f"replay of line {number} differs from {checked}\n")
        return 1
    if not logged:
        out.write(f"replayed; line {number} names a game whose records are not in the log, nothing to compare\n")
        return 1
    out.write(f"verified: line {number} replays to {checked} ({len(recorder.trace.steps)} decisions)\n")
    return 0
