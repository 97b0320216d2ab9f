"""``royalefleet demos record [RUN] --teacher T --battles N``: a teacher's battles recorded as
demonstrations (shared/demos.py) under ``<runs_dir>/<run>/demos/<name>/``.

    royalefleet demos record myrun --teacher scripted:defend --battles 400 --workers 2
    royalefleet demos record myrun --teacher snap:0123456789abcdef --battles 100
    royalefleet demos list myrun

Worker processes (``--workers``, one per core) each step the rollout's own battles
(services/rollout/demos.py) and write whole shards; this process plans the battles, prints
progress, and writes the manifest once every shard is down, then renames ``<name>.partial`` to
``<name>``. Ctrl-C or SIGTERM stops the workers and keeps the shards already finished as the set
``<name>`` of the battles they hold (a shard being written is removed: nothing half-written
stays; a DAgger set with a linear beta, defined over the planned battles, is removed whole); a
worker whose command died any other way (SIGKILL) gets SIGTERM from the kernel and stops too.
A teacher is a scripted player (``shared.scripted.SCRIPTED_PLAYERS``) or a snapshot of the run
(``snap:<id>``), either optionally searching (``scripted:defend+search:8,p=4``: the evaluator's
searched player bound to the recorded battle, so the recorded label is the search's choice);
the opponents are scripted players, snapshots of the run played unsearched (``snap:<id>``: a
searching teacher simulates it as itself, so ``--teacher snap:G+search:... --opponent snap:G``
labels generation G's search against G, the predecessor a next generation's gate plays), or
``mirror`` (the teacher on both seats, both recorded).

DAgger (``--apprentice snap:<id> --beta B``): the apprentice plays a share of the recorded seats'
decisions (B at the set's first battle, decaying linearly to 0 at its last; ``--beta-decay none``: B
in every battle) while the teacher labels every decision, so the rows cover the states the
apprentice leads to (services/rollout/demos.py). ``royalefleet clone`` trains from such a set unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from royalefleet.run_options import EMPTY_LISTING, add_run_argument, add_run_options, run_config
from shared.scripted import SCRIPTED_PLAYERS

DEFAULT_OPPONENTS = ("mirror", "scripted:random_legal", "scripted:first-affordable")
"""Who the teacher plays when ``--opponent`` is not given, in turn: itself (both seats
recorded), the run's random-legal anchor and RoyaleGym's first-affordable bot, so the rows
cover the states the strength measurement's opponents lead to."""
DEFAULT_SHARD_BATTLES = 25
"""Battles per shard file (a few MB to a few tens of MB at the cpu profile)."""


def add_parser(subparsers) -> argparse.ArgumentParser:
    from shared.demos import BETA_DECAYS

    dp = subparsers.add_parser("demos", help="record a teacher's battles as demonstrations (for royalefleet clone)",
                               description="Demonstration sets of a run: `record` plays a teacher with worker "
                               "processes and stores every decision of its seats; `list` shows the run's sets.")
    sub = dp.add_subparsers(dest="demos_command", required=True, metavar="command")
    rp = sub.add_parser(
        "record", help="play a teacher's battles and store its decisions under <run>/demos/<name>/",
        description="Play N battles with the teacher on the recorded seats (the rollout's battles, each worker a "
        "process) and store, for every decision of a recorded seat, the packed observation row (shared.codec), "
        "the teacher's action in the network's head frame (checked legal under our mask; disagreements counted), "
        "the legal set (CSR), the seat and the battle's return and outcome, as shards with a manifest.")
    add_run_argument(rp)
    rp.add_argument("--teacher", action="append", required=True, metavar="PLAYER",
                    help="the teacher: a scripted player (" + ", ".join(SCRIPTED_PLAYERS) + ") or snap:<id>, a "
                    "snapshot of the run; repeat for several (battle b is played by the (b mod T)-th)")
    rp.add_argument("--opponent", action="append", metavar="PLAYER",
                    help="who the teacher plays: a scripted player, snap:<id> (a snapshot of the run, "
                    "unsearched; a searching teacher simulates it as itself), or mirror (the teacher on both seats, "
                    f"both recorded); repeat for several, taken in turn (default: {', '.join(DEFAULT_OPPONENTS)})")
    rp.add_argument("--battles", type=int, required=True, metavar="N", help="battles to play: episodes of the run's training env, so env.max_steps truncates them "
                    "(outcome 0) as it truncates training episodes")
    rp.add_argument("--workers", type=int, default=1, metavar="K",
                    help="worker processes, one per core to spare (default 1); the set is the same file for file "
                    "whatever K is")
    rp.add_argument("--first-battle", type=int, default=0, metavar="B",
                    help="the first battle id (default 0): battles B .. B+N-1, so a second set with another B "
                    "holds other episodes (a battle's episode is a pure function of its id and the master seed)")
    rp.add_argument("--name", help="the set's folder under <run>/demos/ (default: <teacher>-<N>)")
    rp.add_argument("--apprentice", metavar="PLAYER",
                    help="DAgger: this player (snap:<id>, or a scripted player) plays a share of the recorded "
                    "seats' decisions, unsearched, while the teacher labels every one (see --beta)")
    rp.add_argument("--beta", type=float, default=0.5, metavar="B",
                    help="DAgger: the apprentice's share of decisions at the set's first battle, decaying "
                    "linearly to 0 at its last (default 0.5; needs --apprentice; see --beta-decay)")
    rp.add_argument("--beta-decay", choices=BETA_DECAYS, default="linear",
                    help="DAgger: linear (default): beta at the first battle, 0 at the last; none: beta in every "
                    "battle (a constant mixture)")
    rp.add_argument("--shard-battles", type=int, default=DEFAULT_SHARD_BATTLES, metavar="B",
                    help=f"battles per shard file (default {DEFAULT_SHARD_BATTLES})")
    add_run_options(rp, "the run whose config, codec and folder the set belongs to")
    rp.set_defaults(func=cmd_record)
    lp = sub.add_parser("list", help="the run's demonstration sets")
    add_run_argument(lp)
    add_run_options(lp)
    lp.set_defaults(func=cmd_list)
    return dp


def _slug(player: str) -> str:
    from shared.messages import snapshot_of

    sid = snapshot_of(player)
    from shared.search.spec import split_search

    base, spec = split_search(player)
    sid = snapshot_of(base)
    slug = f"snap-{sid[:8]}" if sid else base.split(":", 1)[-1]
    if spec is not None:  # a folder name: no '/' (opp=a/b), the rest kept readable
        slug += "+search-" + spec.suffix()[len("+search:"):].replace(":", "-").replace(",", "_").replace("/", ".")
    return slug


def _did_you_mean(problem: str) -> str:
    """`` (did you mean 'scripted:defend'?)`` for a problem naming an unknown player that is a
    near-miss of a known one, else ``""``."""
    import re

    from royalefleet.player_words import near_player

    m = re.match(r"unknown (?:teacher|opponent) '([^']*)'", problem)
    close = near_player(m.group(1)) if m else None
    return f" (did you mean {close!r}?)" if close else ""


def check_players(teachers: list[str], opponents: list[str], known_snapshots: list[str]) -> list[str]:
    """Problems with the teachers and opponents: each names the bad id and what is known.
    A teacher is a scripted player or one of ``known_snapshots`` (``snap:<id>``); an opponent a
    scripted player, one of ``known_snapshots`` (unsearched) or ``mirror``."""
    from services.rollout.demos import MIRROR

    from shared.search.spec import SEARCH_MARK, split_search

    problems = []
    for t in teachers:
        try:
            base, _ = split_search(t)
        except ValueError as exc:
            problems.append(f"teacher: {exc}")
            continue
        if base not in SCRIPTED_PLAYERS and base not in known_snapshots:
            snaps = ", ".join(known_snapshots) if known_snapshots else "none yet"
            problems.append(f"unknown teacher {t!r}; known: {', '.join(SCRIPTED_PLAYERS)}, and this run's "
                            f"snapshots ({snaps}), each optionally +search:N[:D]")
    for o in opponents:
        if SEARCH_MARK in o:
            problems.append(f"opponent {o!r}: an opponent plays unsearched; drop its +search suffix (a searching "
                            "player is a --teacher)")
        elif o != MIRROR and o not in SCRIPTED_PLAYERS and o not in known_snapshots:
            snaps = ", ".join(known_snapshots) if known_snapshots else "none yet"
            problems.append(f"unknown opponent {o!r}; known: {MIRROR}, {', '.join(SCRIPTED_PLAYERS)}, and this run's "
                            f"snapshots ({snaps})")
    return [p + _did_you_mean(p) for p in problems]


def cmd_record(args, out=None) -> int:
    from royalefleet.players import normalise
    from services.checkpoint.snapshots import SnapshotStore
    from services.checkpoint.store import check_folder_name
    from shared.run_dir import RunDir

    out = out or sys.stdout
    cfg = run_config(args)
    run = RunDir.of(cfg.runs_dir, cfg.run_name)
    store = SnapshotStore(run.snapshots)
    teachers = [normalise(t) for t in args.teacher]
    opponents = [normalise(o) for o in args.opponent or DEFAULT_OPPONENTS]
    problems = check_players(teachers, opponents, ["snap:" + s for s in store.ids()])
    if cfg.obs.frame_stack != 1 and any(t.startswith("snap:") for t in teachers + opponents):
        problems.append(f"a snapshot teacher under obs.frame_stack {cfg.obs.frame_stack}: recording plays one "
                        "decision a row and supports snapshot teachers and opponents at obs.frame_stack 1 only")
    apprentice = normalise(args.apprentice) if args.apprentice else ""
    if apprentice and apprentice not in SCRIPTED_PLAYERS and apprentice not in ["snap:" + i for i in store.ids()]:
        problems.append(f"--apprentice {args.apprentice!r}: expected an unsearched scripted player or one of this "
                        f"run's snapshots (snap:<id>)")
    if not 0.0 <= args.beta <= 1.0:
        problems.append(f"--beta {args.beta}: the apprentice's share is in [0, 1]")
    if args.beta_decay != "linear" and not apprentice:
        problems.append(f"--beta-decay {args.beta_decay}: schedules DAgger's apprentice; give --apprentice PLAYER too, "
                        "or leave it out")
    if args.battles < 1:
        problems.append(f"--battles {args.battles}: record at least 1")
    if args.workers < 1:
        problems.append(f"--workers {args.workers}: at least 1")
    if args.first_battle < 0:
        problems.append(f"--first-battle {args.first_battle}: battle ids start at 0")
    if args.shard_battles < 1:
        problems.append(f"--shard-battles {args.shard_battles}: at least 1")
    name = args.name or "+".join(_slug(t) for t in teachers) + f"-{args.battles}"
    try:
        check_folder_name(name, "--name")
    except ValueError as exc:
        problems.append(str(exc))
    final = run.demos / name
    if final.exists():
        problems.append(f"{final} exists already; pass another --name")
    if problems:
        for p in problems:
            print(f"royalefleet demos record: {p}", file=sys.stderr)
        return 2
    from shared.search.spec import split_search

    bases = {split_search(t)[0] for t in teachers} | set(opponents) | ({apprentice} if apprentice else set())
    snapshots = {t: store.read(t[len("snap:"):]) for t in bases if t.startswith("snap:")}
    return record(cfg, teachers, opponents, args.battles, args.workers, args.shard_battles, final, snapshots, out,
                  first_battle=args.first_battle, apprentice=apprentice, beta=args.beta if apprentice else 0.0,
                  beta_decay=args.beta_decay)


def record(cfg, teachers, opponents, battles, workers, shard_battles, final: Path, snapshots, out, *,
           first_battle: int = 0, apprentice: str = "", beta: float = 0.0, beta_decay: str = "linear") -> int:
    """Plan, run the workers, write the manifest; 0, or 1 when a worker failed, 130 on Ctrl-C, 143 on
    SIGTERM."""
    import multiprocessing as mp

    from services.rollout.demos import WorkerJob, plan_battles, run_worker
    from shared.codec import CODEC_VERSION, table_digest
    from shared.demos import DemoDigests
    from shared.identity import config_digests
    from shared.preflight import run_preflight
    from shared.schedules import value_at

    t0 = time.monotonic()
    pf = run_preflight(cfg.env, cfg.master_seed, frame_stack=cfg.obs.frame_stack)
    digests = DemoDigests(env_spec_digest=config_digests(cfg)["env_spec_digest"], obs_digest=pf.spec.digest(),
                          codec_table_digest=table_digest(pf.table), codec_version=CODEC_VERSION,
                          row_bytes=pf.codec.row_bytes)
    gamma = value_at(cfg.advantage.gamma, 0)
    plan = plan_battles(battles, teachers, opponents, first_battle)
    shards = [plan[i : i + shard_battles] for i in range(0, len(plan), shard_battles)]
    workers = min(workers, len(shards))
    staging = final.with_name(final.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    out.write(f"royalefleet demos record: {battles} battles of {', '.join(teachers)} against {', '.join(opponents)}, "
              f"{len(shards)} shard(s), {workers} worker process(es), into {final} "
              f"(codec {digests.codec_table_digest}, "
              f"{digests.row_bytes:,} B a row, gamma {gamma})\n")
    out.flush()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = []
    for w in range(workers):
        mine = list(range(w, len(shards), workers))
        job = WorkerJob(worker=w, env_cfg=cfg.env, net_cfg=cfg.net, table=pf.table, statics=pf.statics,
                        spec=pf.spec, master_seed=cfg.master_seed, noop_prob=cfg.ladder.random_legal_noop_prob,
                        gamma=gamma, digests=digests, arch_digest=config_digests(cfg)["arch_digest"],
                        snapshots=snapshots, shards=[shards[k] for k in mine], shard_indices=mine, staging=str(staging),
                        apprentice=apprentice, beta=beta, beta_decay=beta_decay, first_battle=first_battle,
                        battles=battles, parent_pid=os.getpid())
        p = ctx.Process(target=run_worker, args=(job, queue), name=f"demos-worker-{w}", daemon=True)
        p.start()
        procs.append(p)
    collector = DemoCollector(battles, len(shards), out)
    try:
        with _sigterm_as(_Terminated):
            code = collector.collect(queue, procs)
    except (KeyboardInterrupt, _Terminated) as stop:
        _stop(procs)
        collector.drain(queue)
        how, code = ("SIGTERM", 143) if isinstance(stop, _Terminated) else ("Ctrl-C", 130)
        out.write(f"\nroyalefleet demos record: stopped ({how}) after {collector.done} of {battles} battles; ")
        if not collector.shard_entries or (apprentice and beta_decay == "linear"):
            shutil.rmtree(staging, ignore_errors=True)
            why = ("no shard was finished" if not collector.shard_entries else
                   "a DAgger set's linear beta runs over the planned battles, so a part of it is not that set")
            out.write(f"nothing kept ({why}; {staging} removed)\n")
            return code
        collector.keep_finished(staging)
        manifest = collector.manifest(cfg, final.name, teachers, opponents, gamma, pf.engine, digests, workers,
                                      time.monotonic() - t0, apprentice=apprentice, beta=beta, beta_decay=beta_decay)
        _finish(staging, final, manifest)
        out.write(f"kept the {len(manifest.shards)} finished shard(s) of {len(shards)} as {final}: "
                  f"{len(manifest.battles)} battles, {manifest.rows:,} rows ({manifest.choice_rows:,} choice), digest "
                  f"{manifest.digest}; the unfinished shards' battles are not in it (for more, record another "
                  f"set with another --name and --first-battle {first_battle + battles} or later, so no episode is "
                  f"in both, and give clone both sets)\n")
        return code
    if code:
        _stop(procs)
        shutil.rmtree(staging, ignore_errors=True)
        return code
    for p in procs:
        p.join()
    manifest = collector.manifest(cfg, final.name, teachers, opponents, gamma, pf.engine, digests, workers,
                                  time.monotonic() - t0, apprentice=apprentice, beta=beta, beta_decay=beta_decay)
    _finish(staging, final, manifest)
    rate = battles / max(collector.play_seconds, 1e-9)
    out.write(f"royalefleet demos record: wrote {final}: {manifest.rows:,} rows ({manifest.choice_rows:,} choice, "
              f"{manifest.forced_rows:,} forced), {len(manifest.shards)} shard(s), digest {manifest.digest}; "
              f"{battles} battles in {collector.play_seconds:.1f} s of play (from the last worker's start) "
              f"({rate:.3f} battles/s with {workers} "
              f"worker(s)); teacher actions illegal under our mask: {manifest.illegal_actions}, re-mapped "
              f"indices: {manifest.remapped_actions}\n")
    if apprentice:
        out.write(f"  DAgger: {apprentice} played {collector.counts['apprentice']:,} of the recorded decisions "
                  f"({share_words(beta, beta_decay)}); every row is labelled by the teacher\n")
    searched = collector.counts["searched"]
    if searched:
        unconfirmed = collector.counts["unconfirmed"]
        out.write(f"  the search: {searched:,} searched decisions; it overruled the teacher's base player on "
                  f"{collector.counts['overruled'] / searched:.3f} of them"
                  + (f" ({unconfirmed:,} more overrules not confirmed by fresh playouts)" if unconfirmed else "")
                  + "\n")
    if manifest.illegal_actions:
        out.write(f"  {manifest.illegal_actions} row(s) carry an action our mask does not allow: kept, flagged "
                  "action_legal=False; royalefleet clone leaves them out and says how many\n")
    return 0


class _Terminated(Exception):
    """SIGTERM reached the recording command (``timeout``, a scheduler, ``kill``)."""


@contextlib.contextmanager
def _sigterm_as(exc: type[BaseException]):
    """Within the block, SIGTERM raises ``exc`` (so it stops the workers and cleans up as Ctrl-C
    does) instead of ending the process with its workers left running; the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum, frame):
        raise exc()

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _stop(procs) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=10)


def _finish(staging: Path, final: Path, manifest) -> None:
    """The manifest into the staging folder, then the folder renamed into place (durably)."""
    import os

    import msgspec

    from shared.demos import MANIFEST
    from shared.durable import fsync_dir, write_file

    write_file(staging / MANIFEST, msgspec.json.format(msgspec.json.encode(manifest), indent=1))
    fsync_dir(staging)
    os.replace(staging, final)
    fsync_dir(final.parent)


class DemoCollector:
    """The parent's side of the recording workers' queue: progress lines and the set's totals.
    (Named apart from the learner's ``Collector`` of rollout rows, which is unrelated.)"""

    def __init__(self, battles: int, n_shards: int, out):
        from services.rollout.demos import RECORD_COUNTS

        self.battles, self.n_shards, self.out = battles, n_shards, out
        self.entries, self.shard_entries = [], {}
        self.counts = dict.fromkeys(RECORD_COUNTS, 0)
        self.rows = self.choice = 0
        self.done = self.ready = 0
        self.t0 = time.monotonic()
        self.play_seconds = 0.0
        self._last = 0.0

    def collect(self, queue, procs) -> int:
        """Read until every worker is done; 0, or 1 after a worker's error or death."""
        import queue as queue_mod

        finished = set()
        while len(finished) < len(procs):
            try:
                msg = queue.get(timeout=1.0)
            except queue_mod.Empty:
                dead = [p for i, p in enumerate(procs) if i not in finished and not p.is_alive()]
                if dead:
                    print(f"royalefleet demos record: worker {dead[0].name} died (exit {dead[0].exitcode}) before "
                          "finishing; nothing kept", file=sys.stderr)
                    return 1
                continue
            kind = msg[0]
            if kind == "ready":
                self.ready += 1
                if self.ready == len(procs):  # the play clock starts once every worker has built its battle
                    self.t0 = time.monotonic()
            elif kind in ("battle", "shard"):
                self._take(msg)
            elif kind == "done":
                finished.add(msg[1])
            elif kind == "error":
                print(f"royalefleet demos record: worker {msg[1]} failed: {msg[2]}nothing kept", file=sys.stderr)
                return 1
        self.play_seconds = time.monotonic() - self.t0
        return 0

    def _take(self, msg) -> None:
        """A worker's ``("battle", entry, counts)`` or ``("shard", index, ShardEntry)``."""
        if msg[0] == "battle":
            self._battle(msg[1], msg[2])
        else:
            self.shard_entries[msg[1]] = msg[2]
            self.rows += msg[2].rows
            self.choice += msg[2].choice_rows

    def _battle(self, entry, counts) -> None:
        self.entries.append(entry)
        for k in self.counts:
            self.counts[k] += counts[k]
        self.done += 1
        now = time.monotonic()
        if now - self._last >= 5.0 or self.done == self.battles:
            self._last = now
            el = now - self.t0
            rate = self.done / max(el, 1e-9)
            eta = (self.battles - self.done) / max(rate, 1e-9)
            self.out.write(f"  {self.done}/{self.battles} battles, {el:.0f} s, {rate:.3f} battles/s, eta {eta:.0f} s; "
                           f"{self.rows:,} rows in finished shards; illegal teacher actions {self.counts['illegal']}\n")
            self.out.flush()

    def drain(self, queue) -> None:
        """Take what the stopped workers had already sent (a shard finished just before the stop)."""
        import queue as queue_mod

        while True:
            try:
                msg = queue.get(timeout=0.2)
            except queue_mod.Empty:
                return
            except Exception:  # noqa: BLE001 - a worker stopped mid-put: what came before it is kept
                return
            if msg[0] in ("battle", "shard"):
                self._take(msg)

    def keep_finished(self, staging: Path) -> None:
        """Before a stopped recording's manifest: only the finished shards' battles stay in the
        set, and every file in ``staging`` that is not a finished shard (one a worker was writing)
        is removed."""
        kept = {b for e in self.shard_entries.values() for b in e.battles}
        self.entries = [e for e in self.entries if e.battle in kept]
        files = {e.file for e in self.shard_entries.values()}
        for path in staging.iterdir():
            if path.name in files:
                continue
            if path.is_file():
                path.unlink()
            else:
                shutil.rmtree(path, ignore_errors=True)

    def manifest(self, cfg, name, teachers, opponents, gamma, engine, digests, workers, seconds, *,
                 apprentice: str = "", beta: float = 0.0, beta_decay: str = "linear"):
        from shared.demos import DemoManifest

        shards = [self.shard_entries[k] for k in sorted(self.shard_entries)]
        rows = sum(s.rows for s in shards)
        choice = sum(s.choice_rows for s in shards)
        return DemoManifest(
            name=name, run_name=cfg.run_name, teachers=list(teachers), opponents=list(opponents),
            master_seed=cfg.master_seed, seed_rule="env/battle/{battle}/ordinal/0",
            gamma=gamma, engine=engine, digests=digests, battles=sorted(self.entries, key=lambda e: e.battle),
            shards=shards, rows=rows, choice_rows=choice, forced_rows=rows - choice,
            illegal_actions=self.counts["illegal"], remapped_actions=self.counts["remapped"], workers=workers,
            seconds=round(seconds, 3), apprentice=apprentice, beta=beta,
            beta_decay=beta_decay if apprentice else "linear")


def cmd_list(args, out=None) -> int:
    from shared.demos import DemosError, read_manifest
    from shared.run_dir import RunDir

    out = out or sys.stdout
    cfg = run_config(args, must_exist=True)
    root = RunDir.of(cfg.runs_dir, cfg.run_name).demos
    names = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.endswith(".partial")) \
        if root.is_dir() else []
    if not names:
        out.write(f"run {cfg.run_name!r} has no demonstration set under {root}; record one with "
                  "`royalefleet demos record`\n")
        return EMPTY_LISTING
    for n in names:
        try:
            m = read_manifest(root / n)
        except DemosError as exc:
            out.write(f"{n}: UNREADABLE: {exc}\n")
            continue
        out.write(f"{n}: {', '.join(m.teachers)} vs {', '.join(m.opponents)}, {len(m.battles)} battles, "
                  f"{m.rows:,} rows ({m.choice_rows:,} choice), digest {m.digest}{dagger_words(m)}\n")
    return 0


def dagger_words(m) -> str:
    """The end of a set's listing line: empty for a plain set; for a DAgger set, who played a share
    of its decisions and how the share ran, so a listing tells the two apart (the teacher labelled
    every row of both)."""
    if not m.apprentice:
        return ""
    return f"; DAgger: {m.apprentice} played a share ({share_words(m.beta, m.beta_decay)})"


def share_words(beta: float, decay: str) -> str:
    """How DAgger's apprentice share ran over a set, as the recording and the listing say it."""
    return f"beta {beta:g} " + ("in every battle" if decay == "none" else "decaying to 0")
