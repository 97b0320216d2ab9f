"""``royalefleet doctor [--profile P | --config F] [--compose]``: can this machine carry the run?

One line per check, ``ok``, ``warn`` or ``FAIL``, each failure and warning with its fix; exit 0
when every check is ok, 1 with warnings only, 2 with a failure. The checks:

* ``python``, ``packages``: Python >= 3.12; torch, royalegym, royalesim, msgspec, pyzmq installed
  (versions printed).
* ``engine``: one ``RustEngine`` built; its build digest and binary hash printed (what a rollout
  must match, ``Hello.engine``); a warning when the run's newest checkpoint was trained on another
  engine (its ``identity/identity.json``), which a resume refuses without ``--allow-identity-drift``.
* ``cuda``: the device the config asks for (``net.device``) against what torch sees: ``cuda``
  without a GPU is a failure; the GPU's name and free / total memory otherwise.
* ``memory``: what the config needs against what the machine has (``/proc/meminfo``
  MemAvailable, or ``--memory-gb``). The learner's part is MEASURED: the config's network is
  built and one minibatch (``ppo.minibatch_size`` rows of real observations, packed and unpacked
  by the run's codec) goes forward and backward through it with its two Adams stepped, and the
  process's peak resident set (VmHWM, reset first through /proc/self/clear_refs) over that is
  taken, plus the iteration's rectangle (``timesteps_per_iteration`` rows of the codec's row
  bytes). The rollouts' part is the resident growth measured while this process built and
  stepped its battles, times ``rollout.battles x local.rollouts`` (and the evaluators'). Above
  the machine's: FAIL; above 80 % of it: warn. On CUDA the minibatch's peak allocation is
  checked against the GPU's free memory the same way.
* ``disk``: free space under ``runs_dir`` against the checkpoints the config keeps
  (``checkpoint.keep + 1``: one is written before the oldest is pruned), each sized from the
  run's newest checkpoint when it has one, else from the network's parameter count (weights and
  both Adam moments in float32).
* ``ports``: every port ``royalefleet up`` binds is free on ``services.host``.
* ``curve``: with ``ROYALEFLEET_CURVE_DIR`` set, each key file in it loads with pyzmq and the
  allow-list folder holds at least one client key; unset: off (loopback).
* ``battles``: a few real battles stepped (random legal play, ``DOCTOR_DECISIONS`` decisions):
  the observation's shapes are the declared layout (``shared.envs.ObsSpec``), action 0 (the
  no-op) is legal at every decision, ``mask_planes`` is ``action_mask[1:]`` as (slots, H, W),
  and RoyaleGym's ``encode`` / ``decode`` agree with ``1 + slot * H * W + y * W + x`` for every
  legal action seen.
* ``compose`` (with ``--compose``): ``docker compose config`` of compose.yaml (and
  compose.gpu.yaml, compose.rollout.yaml) parses.
* ``alerts`` (with ``--compose``): ``ALERT_WEBHOOK_URL`` is set (the environment, else ``.env``
  beside compose.yaml) to an http(s) URL: unset, Alertmanager posts every alert to a dead
  address and nobody is told (docs/alarms.md).

``royalefleet up`` runs the fast subset (``FAST``: everything but the measured memory and
Compose) before it starts anything, and refuses with the same lines when one fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from royalefleet.run_options import add_run_argument, add_run_options, run_name_of
from shared.run_dir import RunDir

OK, WARN, FAIL = "ok", "warn", "FAIL"
DOCTOR_DECISIONS = 200
"""Decisions stepped by the battle check (two battles' openings and a card phase: the opening
lockout is 9 decisions, royalegym-notes §3)."""
MEMORY_WARN_SHARE = 0.8
"""Above this share of the machine's memory the memory check warns."""
PACKAGES = ("torch", "royalegym", "royalesim", "msgspec", "pyzmq")
MIN_PYTHON = (3, 12)
FAST = ("python", "packages", "engine", "cuda", "disk", "ports", "curve", "battles")
"""The checks ``royalefleet up`` runs before it starts anything (a few seconds)."""


@dataclass
class Check:
    name: str
    level: str
    text: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.level:<4}  {self.name:<8}  {self.text}" + (f"\n      {'':<8}  fix: {self.fix}" if self.fix else "")


def add_parser(subparsers) -> argparse.ArgumentParser:
    dp = subparsers.add_parser(
        "doctor", help="check this machine against a config before a run: ok / warn / FAIL per check, with fixes",
        description="Check versions, the engine, CUDA, memory (measured on one real minibatch), disk for the "
        "checkpoints kept, free ports, CURVE keys, the observation layout and action encoding on real battles, and "
        "with --compose the Compose files. Exit 0 all ok, 1 warnings, 2 a failure.")
    add_run_argument(dp)
    add_run_options(dp)
    dp.add_argument("--compose", action="store_true", help="also check the Compose files with `docker compose config`")
    dp.add_argument("--memory-gb", type=float, help="memory to check against instead of this machine's available")
    dp.add_argument("--fast", action="store_true", help="only the fast subset `royalefleet up` runs")
    dp.set_defaults(func=cmd_doctor)
    return dp


# ----------------------------------------------------------------------------- checks


def check_python(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> Check:
    have = ".".join(map(str, version))
    if tuple(version[:2]) < MIN_PYTHON:
        return Check("python", FAIL, f"Python {have}; royalegym needs {'.'.join(map(str, MIN_PYTHON))} or newer",
                     "install Python 3.12 and make the virtual environment with it (`make venv`)")
    return Check("python", OK, f"Python {have}")


def check_packages(version_of: Callable[[str], str] | None = None) -> Check:
    from importlib import metadata

    version_of = version_of or metadata.version
    found, missing = [], []
    for name in PACKAGES:
        try:
            found.append(f"{name} {version_of(name)}")
        except metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        return Check("packages", FAIL, f"not installed: {', '.join(missing)} (found {', '.join(found) or 'none'})",
                     "pip install -e . in the project's virtual environment (pyproject.toml pins them)")
    return Check("packages", OK, ", ".join(found))


def check_engine(cfg=None) -> Check:
    """A RustEngine builds here; with ``cfg``, also whether the run's newest checkpoint was
    trained on this engine (``engine_moved``: a warning, since a resume may mean to drift)."""
    try:
        from royalegym import RustEngine

        engine = RustEngine()
        ident = engine.engine_identity() if hasattr(engine, "engine_identity") else {}
    except Exception as exc:  # an engine that does not build is exactly what this reports
        return Check("engine", FAIL, f"RustEngine() failed: {type(exc).__name__}: {exc}",
                     "reinstall royalesim for this platform (pip install --force-reinstall royalesim)")
    text = (f"RustEngine, {len(engine.cards())} cards, build {ident.get('build_digest', '?')[:16]}, "
            f"binary {ident.get('engine_binary_sha256', '?')[:16]}")
    if cfg is not None:
        moved = engine_moved(cfg)
        if moved:
            return Check("engine", WARN, f"{text}; {moved}",
                         "install the royalegym / royalesim the run was trained with, or resume on purpose with "
                         "`royalefleet resume --allow-identity-drift` (recorded in drift.json)")
    return Check("engine", OK, text)


def engine_moved(cfg) -> str | None:
    """How this machine's engine differs from the one the run's newest checkpoint was trained on
    (its ``identity/identity.json``), or None (same engine, or no checkpoint)."""
    import msgspec

    from services.checkpoint.store import CheckpointStore
    from shared.envs import build_env, engine_build
    from shared.identity import RunIdentity

    root = RunDir.of(cfg.runs_dir, cfg.run_name).checkpoints
    if not root.is_dir():
        return None
    entries = [e for e in CheckpointStore(root).list_entries() if e.ok]
    if not entries:
        return None
    path = root / entries[-1].name / "identity" / "identity.json"
    try:
        recorded = msgspec.json.decode(path.read_bytes(), type=RunIdentity).engine
    except (OSError, msgspec.DecodeError):
        return None
    env = build_env(cfg.env)
    here = engine_build(env)
    env.close()
    if here == recorded:
        return None
    fields = [f for f in recorded.__struct_fields__ if getattr(recorded, f) != getattr(here, f)]
    return (f"the run's checkpoint {entries[-1].name} was trained on another engine ({', '.join(fields)}: "
            + "; ".join(f"{getattr(recorded, f)} there, {getattr(here, f)} here" for f in fields)
            + "): a resume refuses it")


def check_cuda(cfg, cuda_available: bool | None = None) -> Check:
    import torch

    available = torch.cuda.is_available() if cuda_available is None else cuda_available
    want = cfg.net.device
    if want == "cuda" and not available:
        return Check("cuda", FAIL, "net.device is cuda but torch sees no CUDA device "
                     f"(torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'})",
                     "set net.device to auto or cpu, or install the CUDA build of torch and the NVIDIA driver")
    if not available:
        return Check("cuda", OK, f"no CUDA device; the learner runs on the CPU (net.device {want})")
    free, total = torch.cuda.mem_get_info()
    return Check("cuda", OK, f"{torch.cuda.get_device_name(0)}: {free / 2**30:.1f} GiB free of "
                 f"{total / 2**30:.1f} GiB (net.device {want})")


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}")


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where it cannot be."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def available_bytes() -> int:
    """MemAvailable of /proc/meminfo (bytes). Raises OSError off Linux."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise OSError("/proc/meminfo has no MemAvailable")


@dataclass
class Measured:
    """What ``measure`` found (bytes): the learner's minibatch peak over its resting set, the
    learner's resting set, one battle's resident cost, the rectangle, and the CUDA peak."""

    minibatch_peak: int
    learner_base: int
    per_battle: int
    rectangle: int
    cuda_peak: int
    seconds: float
    process_base: int = 0
    """A torch-free process (a rollout's) after building and stepping its first battle."""


ROLLOUT_PROBE = """
import sys, msgspec
from shared.config import EnvConfig
from shared.envs import build_env
from royalefleet.cmd_doctor import check_battles, _status_kb
cfg = msgspec.json.decode(sys.argv[1], type=EnvConfig)
class C: pass
c = C(); c.env = cfg
envs = [build_env(cfg)]
check_battles(c, decisions=100, env=envs[0])
first = _status_kb("VmRSS") * 1024
for _ in range(PROBE_EXTRA):
    envs.append(build_env(cfg))
    check_battles(c, decisions=100, env=envs[-1])
print(first, (_status_kb("VmRSS") * 1024 - first) // PROBE_EXTRA)
"""
PROBE_EXTRA = 4
"""Battles the probe builds after its first, all kept alive: their mean growth is one battle's cost."""


def rollout_process_bytes(cfg) -> tuple[int, int]:
    """(resident bytes of a fresh torch-free process that built and stepped one battle of the
    config's env, as a rollout's first battle is; each further battle's resident growth),
    measured in a subprocess."""
    import msgspec

    probe = ROLLOUT_PROBE.replace("PROBE_EXTRA", str(PROBE_EXTRA))
    done = subprocess.run([sys.executable, "-c", probe, msgspec.json.encode(cfg.env).decode()],
                          capture_output=True, text=True, timeout=300,
                          cwd=str(Path(__file__).resolve().parent.parent))
    if done.returncode != 0:
        raise RuntimeError(f"the rollout-process probe failed: {done.stderr.strip()[-300:]}")
    first, each = done.stdout.strip().splitlines()[-1].split()
    return int(first), max(0, int(each))


def measure(cfg) -> Measured:
    """Build the config's network and run one real minibatch forward and backward (module
    docstring, ``memory``). Takes seconds: the codec's preflight plays 1,000 random-legal states."""
    import msgspec
    import numpy as np
    import torch

    from royalefleet.bench.update import legal_counts, real_rows, synthetic_update_data
    from services.learner.ppo import make_optimizers, ppo_update
    from services.learner.service import evaluate_schedules
    from shared.nn.model import ActorCritic
    from shared.nn.policy import Policy
    from shared.preflight import run_preflight
    from shared.seeding import stream

    t0 = time.perf_counter()
    process, per_battle = rollout_process_bytes(cfg)
    pf = run_preflight(cfg.env, cfg.master_seed, frame_stack=cfg.obs.frame_stack)
    device = torch.device("cuda" if cfg.net.device != "cpu" and torch.cuda.is_available() else "cpu")
    model = ActorCritic(pf.spec, cfg.net, seed=0).to(device)
    opt_actor, opt_critic = make_optimizers(model, cfg.ppo)
    policy = Policy(model, pf.codec, device)
    n = cfg.ppo.minibatch_size
    rows = real_rows(cfg.env, pf.codec, n)
    data = synthetic_update_data(policy, rows, legal_counts(rows, pf.codec))
    ppo = msgspec.structs.replace(cfg.ppo, n_epochs=1, batch_size=n, minibatch_size=n)
    sched = evaluate_schedules(cfg, 0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    base = _status_kb("VmRSS") * 1024
    exact = _reset_peak()
    ppo_update(model, opt_actor, opt_critic, data, ppo,
               lambda e: stream(cfg.master_seed, "ppo/minibatch/iteration/{iteration}/epoch/{epoch}",
                                iteration=0, epoch=e),
               device, ent_coef=sched["ent_coef"], ent_coef_noop=sched["ent_coef_noop"])
    peak = _status_kb("VmHWM") * 1024 if exact else _status_kb("VmRSS") * 1024
    cuda_peak = int(torch.cuda.max_memory_allocated()) if device.type == "cuda" else 0
    rect = cfg.ppo.timesteps_per_iteration * int(np.asarray(rows[0]).nbytes) * 2  # rows + final rows, worst case
    return Measured(max(0, peak - base), base, per_battle, rect, cuda_peak, time.perf_counter() - t0, process)


def check_memory(cfg, measured: Measured, have: int | None = None) -> Check:
    """The config's need (``measured``, scaled as the module docstring says) against ``have``
    bytes (default: MemAvailable)."""
    if have is None:
        try:
            have = available_bytes()
        except OSError as exc:
            return Check("memory", WARN, f"cannot read the machine's memory ({exc})",
                         "check by hand that the learner and the rollouts fit")
    learner = measured.learner_base + measured.minibatch_peak + measured.rectangle
    battles = cfg.rollout.battles * cfg.local.rollouts
    process = measured.process_base
    rollouts = measured.per_battle * battles + process * cfg.local.rollouts
    evaluators = (measured.per_battle + process) * cfg.local.evaluators
    need = learner + rollouts + evaluators
    gib = 2**30
    text = (f"needs {need / gib:.2f} GiB of {have / gib:.2f} GiB: learner {learner / gib:.2f} (one minibatch of "
            f"{cfg.ppo.minibatch_size} rows forward and backward: peak +{measured.minibatch_peak / 2**20:.0f} MiB "
            f"over {measured.learner_base / 2**20:.0f} MiB; rectangle {measured.rectangle / 2**20:.0f} MiB), "
            f"{cfg.local.rollouts} rollout(s) of {cfg.rollout.battles} battles {rollouts / gib:.2f} "
            f"({measured.per_battle / 2**20:.1f} MiB a battle, measured, and {process / 2**20:.0f} MiB a process), "
            f"{cfg.local.evaluators} evaluator(s) {evaluators / gib:.2f}")
    if need > have:
        return Check("memory", FAIL, text, "lower rollout.battles or local.rollouts, ppo.minibatch_size or "
                     "ppo.timesteps_per_iteration, or pick a smaller profile (`royalefleet config --profile cpu`)")
    if need > MEMORY_WARN_SHARE * have:
        return Check("memory", WARN, text + f" (over {MEMORY_WARN_SHARE:.0%})",
                     "leave headroom: lower rollout.battles or ppo.minibatch_size")
    return Check("memory", OK, text)


def check_vram(cfg, measured: Measured, free: int | None = None) -> Check | None:
    """The minibatch's CUDA peak against the GPU's free memory; None when not on CUDA."""
    if not measured.cuda_peak and free is None:
        return None
    if free is None:
        import torch

        free, _ = torch.cuda.mem_get_info()
    text = f"one minibatch peaks at {measured.cuda_peak / 2**20:.0f} MiB of {free / 2**20:.0f} MiB free on the GPU"
    if measured.cuda_peak > free:
        return Check("vram", FAIL, text, "lower ppo.minibatch_size (a memory knob only: gradients accumulate)")
    if measured.cuda_peak > MEMORY_WARN_SHARE * free:
        return Check("vram", WARN, text, "lower ppo.minibatch_size to leave headroom")
    return Check("vram", OK, text)


def checkpoint_bytes(cfg, spec=None) -> tuple[int, str]:
    """(bytes of one checkpoint, where the figure comes from): the run's newest checkpoint when
    it has one, else the network's parameters x 3 (weights and two Adam moments) x 4 bytes."""
    root = RunDir.of(cfg.runs_dir, cfg.run_name).checkpoints
    if root.is_dir():
        try:
            from services.checkpoint.store import CheckpointStore

            entries = [e for e in CheckpointStore(root).list_entries() if e.ok]
            if entries:
                return int(entries[-1].bytes), f"the run's checkpoint {entries[-1].name}"
        except (OSError, ValueError):
            pass
    from shared.envs import build_env, obs_spec
    from shared.nn.model import ActorCritic

    if spec is None:
        env = build_env(cfg.env)
        spec = obs_spec(env)
        env.close()
    counts = ActorCritic(spec, cfg.net, seed=0).parameter_count()
    params = counts["actor"] + counts["critic"]
    return params * 3 * 4, f"{params:,} parameters x 3 (weights, Adam's two moments) x 4 bytes"


def check_disk(cfg, free: int | None = None, one: tuple[int, str] | None = None) -> Check:
    where = Path(cfg.runs_dir).absolute()
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if free is None:
        free = shutil.disk_usage(probe).free
    size, source = one or checkpoint_bytes(cfg)
    need = size * (cfg.checkpoint.keep + 1)
    text = (f"{free / 2**30:.2f} GiB free at {probe}; {cfg.checkpoint.keep} + 1 checkpoints of "
            f"{size / 2**20:.1f} MiB ({source}) need {need / 2**30:.2f} GiB")
    if free < need:
        return Check("disk", FAIL, text, "free space there, point runs_dir elsewhere (--runs-dir), or lower "
                     "checkpoint.keep")
    if free < 2 * need:
        return Check("disk", WARN, text + "; metrics, logs and snapshots grow too", "leave room: free space there")
    return Check("disk", OK, text)


def check_ports(cfg) -> Check:
    from royalefleet.launcher import host_not_here, ports_in_use

    not_here = host_not_here(cfg)
    if not_here:
        return Check("ports", FAIL, not_here, "set services.host in the run's config.json to an address of this "
                     "machine (127.0.0.1 when every rollout is local)")
    busy = ports_in_use(cfg, cfg.local.rollouts)
    if busy:
        return Check("ports", FAIL, "in use: " + "; ".join(busy),
                     "stop what holds them (another `royalefleet up`?), or change the ports under \"services\"")
    s = cfg.services
    return Check("ports", OK, f"free on {s.host}: learner {s.learner_port}, ladder {s.ladder_port}, checkpoint "
                 f"{s.checkpoint_port} and the metrics ports")


def check_curve(environ=None, host: str = "127.0.0.1") -> Check:
    """The CURVE keys load; with CURVE off, ``host`` (``services.host``) beyond loopback FAILs
    unless ROYALEFLEET_INSECURE_PLAINTEXT=1, which WARNs (royalefleet/doctor_plaintext.py)."""
    from royalefleet.doctor_plaintext import plaintext_problem
    from shared import transport

    env = os.environ if environ is None else environ
    folder = env.get(transport.CURVE_DIR_ENV, "")
    if not folder:
        problem = plaintext_problem(host, env)
        if problem is not None:
            return Check("curve", {"FAIL": FAIL, "WARN": WARN}[problem[0]], problem[1],
                         "royalefleet keys, then ROYALEFLEET_CURVE_DIR=keys (docs/reliability.md, threat model)")
        return Check("curve", OK, f"off ({transport.CURVE_DIR_ENV} unset: loopback traffic is not authenticated)")
    from royalefleet import key_roles

    given, folder = folder, key_roles.curve_dir_for(folder, "learner")  # a learner host's folder: the learner's keys
    problems = []
    for name, secret in ((transport.SERVER_PUBLIC, False), (transport.SERVER_SECRET, True),
                         (transport.CLIENT_PUBLIC, False), (transport.CLIENT_SECRET, True)):
        path = os.path.join(folder, name)
        try:
            transport._load_key(path, secret=secret)
        except OSError as exc:
            problems.append(str(exc).split(" (generate")[0])
    allowed = os.path.join(folder, transport.ALLOWED_CLIENTS)
    try:
        clients = [f for f in os.listdir(allowed) if f.endswith(".key")]
    except OSError as exc:
        problems.append(f"allow-list {allowed}: {exc.strerror or exc}")
        clients = None
    if clients is not None and not clients:
        problems.append(f"allow-list {allowed} holds no client key: no rollout could connect")
    if problems:
        return Check("curve", FAIL, "; ".join(problems),
                     f"make the keys with `royalefleet keys --dir {given}`, readable by this user")
    return Check("curve", OK, f"keys in {folder} load; {len(clients)} client key(s) allowed")


def check_battles(cfg, decisions: int = DOCTOR_DECISIONS, env=None) -> Check:
    """Step real battles (module docstring, ``battles``)."""
    import numpy as np
    from royalegym import RandomLegalOpponent

    from shared.envs import build_env, obs_spec

    env = env or build_env(cfg.env)
    spec = obs_spec(env)
    h, w = spec.height, spec.width
    rng = np.random.default_rng(0)
    player = RandomLegalOpponent(0.5)
    problems: list[str] = []
    obs, _ = env.reset(seed=0)
    plays = battles = 1
    for t in range(decisions):
        for seat in ("blue", "red"):
            o = obs[seat]
            want = {"spatial": (len(spec.plane_names), h, w), "vector": (spec.vector_size,),
                    "action_mask": (spec.n_actions,), "mask_planes": (spec.hand_slots, h, w)}
            if spec.id_planes:
                want["card_ids"] = (spec.id_planes, h, w)
            for key, shape in want.items():
                if tuple(o[key].shape) != shape:
                    problems.append(f"decision {t} {seat}: {key} has shape {tuple(o[key].shape)}, the layout "
                                    f"declares {shape}")
            mask = o["action_mask"]
            if not mask[0]:
                problems.append(f"decision {t} {seat}: the no-op (action 0) is not legal")
            grid = mask[1 : spec.n_grid_actions]  # the ability buttons after it are not planes
            if not np.array_equal(grid.reshape(spec.hand_slots, h, w), o["mask_planes"]):
                problems.append(f"decision {t} {seat}: mask_planes is not action_mask[1:{spec.n_grid_actions}] as "
                                f"({spec.hand_slots}, {h}, {w})")
            for a in np.flatnonzero(grid)[:50] + 1:
                slot, rest = divmod(int(a) - 1, h * w)
                y, x = divmod(rest, w)
                if env.action_parser.encode(slot, x, y) != a or tuple(env.action_parser.decode(int(a))) != (slot, x, y):
                    problems.append(f"decision {t} {seat}: action {a} is slot {slot} tile ({x}, {y}) by "
                                    "1 + slot*H*W + y*W + x, RoyaleGym's encode/decode say otherwise")
                    break
            plays += int(grid.any())
        if len(problems) > 3:
            break
        obs, _, term, trunc, _ = env.step({s: player.act(obs[s], obs[s]["action_mask"], rng) for s in ("blue", "red")})
        if term["blue"] or trunc["blue"]:
            battles += 1
            obs, _ = env.reset(seed=battles)
    if problems:
        return Check("battles", FAIL, "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""),
                     "install the royalegym version pyproject.toml pins; the codec and the network read this layout")
    return Check("battles", OK, f"{decisions} decisions of {battles} battle(s): layout {len(spec.plane_names)}x{h}x{w} "
                 f"+ {spec.vector_size}, {spec.n_actions} actions; no-op always legal, mask planes and action "
                 "encoding agree")


def check_compose(root: Path | None = None, docker: str | None = None) -> Check:
    root = root or Path(__file__).resolve().parent.parent
    docker = docker or shutil.which("docker")
    if docker is None:
        return Check("compose", FAIL, "no `docker` command on PATH",
                     "install Docker with the Compose v2 plugin (or podman with deploy/podman/compose, docs/compose.md)")
    try:  # the plugin first: without it every `docker compose ...` fails with docker's own usage text
        plugin = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("compose", FAIL, f"`docker compose version` did not run: {exc}", "install Docker Compose v2")
    if plugin.returncode != 0:
        return Check("compose", FAIL, f"`{docker} compose` is not available here (no Compose v2 plugin)",
                     "install the Docker Compose v2 plugin (Debian: docker-compose-plugin or docker-compose), or "
                     "podman with deploy/podman/compose (docs/compose.md)")
    results = []
    for files in (["compose.yaml"], ["compose.yaml", "compose.gpu.yaml"], ["compose.rollout.yaml"]):
        if not all((root / f).exists() for f in files):
            continue
        args = [docker, "compose"] + [a for f in files for a in ("-f", str(root / f))] + ["config", "-q"]
        env = dict(os.environ)
        env.setdefault("ROYALEFLEET_LEARNER", "tcp://learner-host:5555")  # compose.rollout.yaml requires it
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Check("compose", FAIL, f"`{' '.join(args[:2])}` did not run: {exc}", "install Docker Compose v2")
        if done.returncode != 0:
            return Check("compose", FAIL, f"{' + '.join(files)}: {(done.stderr or done.stdout).strip().splitlines()[-1:]}",
                         "fix the file, or the settings it reads (.env, deploy/env/*.env)")
        results.append(" + ".join(files))
    from royalefleet.doctor_plaintext import compose_plaintext, compose_settings

    level, said = compose_plaintext(compose_settings(root))
    if level != "OK":
        return Check("compose", {"FAIL": FAIL, "WARN": WARN}[level], said, "docs/compose.md, docs/reliability.md")
    return Check("compose", OK, "docker compose config parses " + ", ".join(results) + f"; {said}")


def env_file_value(path: Path, name: str) -> str | None:
    """``name``'s value in a Compose ``.env`` file (``NAME=value`` lines, the last one wins,
    surrounding quotes dropped, ``#`` lines skipped), or None when the file or the line is absent."""
    if not path.exists():
        return None
    value = None
    for line in path.read_text(errors="replace").splitlines():
        key, sep, rest = line.strip().removeprefix("export ").partition("=")
        if sep and key.strip() == name:
            rest = rest.strip()
            value = rest[1:-1] if len(rest) >= 2 and rest[0] == rest[-1] and rest[0] in "'\"" else rest
    return value


def check_alert_receiver(root: Path | None = None, environ=os.environ) -> Check:
    """FAIL when ``ALERT_WEBHOOK_URL`` is unset or not an http(s) URL, naming the variable."""
    from royalefleet.alert_names import ALERT_WEBHOOK_VAR

    root = root or Path(__file__).resolve().parent.parent
    url = environ.get(ALERT_WEBHOOK_VAR)
    where = "the environment"
    if url is None:
        url, where = env_file_value(root / ".env", ALERT_WEBHOOK_VAR), str(root / ".env")
    fix = (f"echo {ALERT_WEBHOOK_VAR}=https://ntfy.sh/<topic> >> .env (any URL that takes a POST), then "
           "`royalefleet alerts test` once the monitoring profile is up (docs/alarms.md)")
    if not url:
        return Check("alerts", FAIL, f"{ALERT_WEBHOOK_VAR} is not set (neither in the environment nor in "
                     f"{root / '.env'}): Alertmanager would post every alert to a dead address", fix)
    if not url.startswith(("http://", "https://")):
        return Check("alerts", FAIL, f"{ALERT_WEBHOOK_VAR}={url!r} (from {where}) is not an http:// or https:// URL",
                     fix)
    return Check("alerts", OK, f"{ALERT_WEBHOOK_VAR} is set (from {where}): alerts go to {url.split('?')[0]}")


# ----------------------------------------------------------------------------- running them


def run_checks(cfg, *, only: Iterable[str] | None = None, compose: bool = False, memory_bytes: int | None = None,
               say: Callable[[str], None] = print) -> list[Check]:
    """Run the checks (``only``: those names; default all), printing each line as it comes."""
    names = list(only) if only is not None else list(FAST) + ["memory"] + (["compose", "alerts"] if compose else [])
    out: list[Check] = []

    def add(c: Check | None) -> None:
        if c is not None:
            out.append(c)
            say(c.line())

    for name in names:
        try:
            if name == "python":
                add(check_python())
            elif name == "packages":
                add(check_packages())
            elif name == "engine":
                add(check_engine(cfg))
            elif name == "cuda":
                add(check_cuda(cfg))
            elif name == "disk":
                add(check_disk(cfg))
            elif name == "ports":
                add(check_ports(cfg))
            elif name == "curve":
                add(check_curve(host=cfg.services.host))
            elif name == "battles":
                add(check_battles(cfg))
            elif name == "memory":
                m = measure(cfg)
                add(check_memory(cfg, m, memory_bytes))
                add(check_vram(cfg, m))
            elif name == "compose":
                add(check_compose())
            elif name == "alerts":
                add(check_alert_receiver())
            else:
                raise ValueError(f"unknown check {name!r}")
        except (ImportError, OSError, RuntimeError, ValueError) as exc:
            add(Check(name, FAIL, f"the check itself failed: {type(exc).__name__}: {exc}",
                      "run `royalefleet doctor` again; if it repeats, this is what is wrong"))
    return out


def exit_code(checks: list[Check]) -> int:
    """0 every check ok, 1 a warning (and no failure), 2 a failure."""
    levels = {c.level for c in checks}
    return 2 if FAIL in levels else 1 if WARN in levels else 0


def cmd_doctor(args, out=None) -> int:
    from shared.config import ConfigError, load_config

    out = out or sys.stdout
    overrides: dict = {}
    if run_name_of(args):
        overrides["run_name"] = run_name_of(args)
    if args.runs_dir:
        overrides["runs_dir"] = args.runs_dir
    try:
        cfg = load_config(args.config, profile_name=args.profile, overrides=overrides or None)
    except ConfigError as exc:
        out.write(f"{FAIL:<4}  {'config':<8}  {exc}\n      {'':<8}  fix: correct the config (`royalefleet config` "
                  "writes a complete one)\n")
        return 2
    if run_name_of(args):
        from royalefleet.run_options import refuse_near_miss

        refusal = refuse_near_miss(cfg.runs_dir, cfg.run_name, "doctor")
        if refusal:  # `up` would refuse it the same way
            print(refusal, file=sys.stderr)
            return 2
    out.write(f"royalefleet doctor: profile {cfg.profile}, run {cfg.run_name!r} under {cfg.runs_dir}\n")
    memory = int(args.memory_gb * 2**30) if args.memory_gb is not None else None
    checks = run_checks(cfg, only=FAST if args.fast else None, compose=args.compose, memory_bytes=memory,
                        say=lambda s: (out.write(s + "\n"), out.flush()))
    code = exit_code(checks)
    fails, warns = sum(c.level == FAIL for c in checks), sum(c.level == WARN for c in checks)
    out.write(f"{len(checks)} checks: {fails} failed, {warns} warned" + (" -- fix the FAIL lines before a run\n"
                                                                         if fails else "\n"))
    return code
