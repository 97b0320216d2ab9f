#!/usr/bin/env python3
"""The Compose integration test: the project's own compose.yaml, brought up, trained and broken
on purpose under podman with Docker Compose v2 (pinned), exactly as docs/compose.md tells users to run it.

    deploy/podman/integration-test.sh            # as root; .ci/run runs it after `make test`

Phases (each one timed; the times are printed as it goes and in a table at the end):

  setup      podman, debootstrap, Compose v2.40.3 (deploy/podman/setup.sh, idempotent)
  base       BASE_IMAGE from debootstrap (deploy/podman/make-base-image.sh), unless present
  helpers    the Docker API socket and the health ticker (deploy/podman/service.sh)
  build      `docker compose build`, one build at a time
  up         `docker compose up -d` with 2 rollouts and the monitoring profile (every service
             but grafana: no image here); each role's container sees only its own keys at /keys
             and cannot write its root filesystem
  train      the learner's first finished iteration
  prometheus Prometheus (in the stack) has the learner's row gauges and 2 rollout targets up
             (DNS service discovery), and sends its alerts to the stack's Alertmanager
  kill       `docker kill` one rollout: the loss is counted (health/rollouts_lost,
             health/rows_invalid) and training goes on
  scale      `up --scale rollout=3`: the newcomer joins at the next iteration boundary
  restart    `stop learner`, `start learner`: it resumes from its checkpoint, same run id, and
             the battles continue their episodes (resume/ keys; the result log's ordinals
             neither repeat nor start again)
  tools      docs/compose.md's `fleet` function, as written there, runs `royalefleet status`
             and `royalefleet checkpoints` in a one-off learner container against the volumes
  down       `down -v --rmi all`; then nothing of the test is left: containers, networks,
             volumes, images it built (intermediates too), the base image if it made it, the
             helper processes and its scratch folder

The test's settings are environment variables the Compose file documents (tiny profile via
deploy/config/tiny-example-reward.json, whose reward comes from a user package of the test's own,
deploy/podman/example_user, built into the images with FLEET_USER_CODE and checked in the
restart phase against the result log; 4 battles a rollout, loopback ports picked free); the project is
named royalefleet-it so a deployment on the same host is not touched.

Environment: KEEP_IMAGES=1 keeps the built images and the base image (faster reruns);
IT_TIMEOUT_SCALE multiplies every wait (slow machines).
Stdlib only; needs root (apt, debootstrap, rootful podman).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROJECT = "royalefleet-it"
BASE_IMAGE = os.environ.get("IT_BASE_IMAGE", "localhost/python-base:trixie")
BUILT_IMAGES = ("localhost/royalefleet-learner:latest", "localhost/royalefleet-rollout:latest",
                "localhost/royalefleet-prometheus:latest")
NOT_RUN = {"grafana"}  # no image and no Debian package here; its provisioning is checked by tests
SCALE = float(os.environ.get("IT_TIMEOUT_SCALE", "1"))
KEEP_IMAGES = os.environ.get("KEEP_IMAGES", "") not in ("", "0")
RUN_DIR = "/data/runs/default"  # the learner's run folder in its volume (run_name "default")

T0 = time.monotonic()
PHASES: list[tuple[str, float]] = []


class Failed(Exception):
    pass


class Interrupted(BaseException):
    pass


def log(text: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {text}", flush=True)


class phase:
    def __init__(self, name: str, what: str):
        self.name, self.what = name, what

    def __enter__(self):
        log(f"--- {self.name}: {self.what}")
        self.t = time.monotonic()
        return self

    def __exit__(self, exc_type, exc, tb):
        dt = time.monotonic() - self.t
        PHASES.append((self.name + ("" if exc_type is None else " (FAILED)"), dt))
        log(f"--- {self.name}: {'done' if exc_type is None else 'FAILED'} in {dt:.1f} s")
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- commands


def run(argv: list[str], *, check: bool = True, capture: bool = True, timeout: float = 600,
        quiet: bool = False, on_line=None) -> subprocess.CompletedProcess:
    """Run a command. capture=False streams its output, each line stamped with the test's clock
    (and handed to on_line); the last lines are kept for the error message either way."""
    if not quiet:
        log("$ " + " ".join(a.removeprefix(ROOT + "/") for a in argv))
    if capture:  # stdout is the answer; stderr (warnings) only goes into an error message
        try:
            out = subprocess.run(argv, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except subprocess.TimeoutExpired as exc:
            raise Failed(f"{' '.join(argv)}: no answer in {timeout:.0f} s") from exc
        if check and out.returncode != 0:
            tail = "\n".join(((out.stdout or "") + (out.stderr or "")).splitlines()[-40:])
            raise Failed(f"{' '.join(argv)} exited {out.returncode}\n{tail}")
    else:
        tail: list[str] = []
        with subprocess.Popen(argv, text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, bufsize=1) as proc:
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
            try:
                for line in proc.stdout:
                    line = line.rstrip("\n")
                    if not NOISE.match(line):
                        print(f"[{time.monotonic() - T0:7.1f}s]   {line}", flush=True)
                    tail = (tail + [line])[-40:]
                    if on_line:
                        on_line(line)
                proc.wait()
            except BaseException:
                proc.kill()
                raise
            finally:
                timer.cancel()
        if proc.returncode == -signal.SIGKILL:
            raise Failed(f"{' '.join(argv)}: killed (not done in {timeout:.0f} s)\n" + "\n".join(tail))
        out = subprocess.CompletedProcess(argv, proc.returncode, "\n".join(tail) + "\n", None)
    if check and out.returncode != 0:
        tail = "\n".join((out.stdout or "").splitlines()[-40:])
        raise Failed(f"{' '.join(argv)} exited {out.returncode}\n{tail}")
    return out


NOISE = re.compile(r"^\(Reading database \.\.\. (\d+%)?$|^\s*$")  # dpkg's progress, blank lines


def script(name: str, *args: str, **kw) -> subprocess.CompletedProcess:
    """One of deploy/podman's scripts, through bash (no reliance on the checkout's mode bits)."""
    return run(["bash", os.path.join(HERE, name), *args], **kw)


def docker_cli() -> list[str]:
    """The docker CLI (talking to podman's Docker API), or [] where there is none."""
    return ["docker"] if shutil.which("docker") else []


def compose(*args: str, **kw) -> subprocess.CompletedProcess:
    """`docker compose -p royalefleet-it ...` through deploy/podman/compose, docs/compose.md's podman
    route (it only sets the environment and execs `docker compose`)."""
    return script("compose", "-p", PROJECT, *args, **kw)


def container_cli() -> list[str]:
    return docker_cli() or ["podman"]


def podman(*args: str, **kw) -> subprocess.CompletedProcess:
    return run(["podman", *args], **kw)


def wait_for(what: str, probe, timeout: float, every: float = 2.0):
    """Call probe() until it returns something truthy; Failed after timeout (scaled)."""
    deadline = time.monotonic() + timeout * SCALE
    last_exc = None
    while time.monotonic() < deadline:
        try:
            got = probe()
            if got:
                return got
        except Failed as exc:
            last_exc = exc
        time.sleep(every)
    raise Failed(f"timed out after {timeout * SCALE:.0f} s waiting for {what}" + (f" ({last_exc})" if last_exc else ""))


ROLE_KEYS = {"rollout": "client.key client.key_secret server.key",
             "evaluator": "client.key client.key_secret ladder-evaluator.token server.key",
             "ladder": "clients server.key server.key_secret",
             "learner": "client.key client.key_secret clients server.key server.key_secret"}
"""What each role's container sees at /keys (royalefleet/key_roles.py): a rollout or an
evaluator never the servers' secret."""


def check_role_keys() -> None:
    """Each role's container holds only its own keys (the names under /keys, copied out as a tar
    stream and read here: no exec, whose podman 4.3 session process outlives the container), and
    its root filesystem is read-only (compose.yaml's per-role keys volumes and hardening)."""
    import io
    import tarfile

    for svc, want in ROLE_KEYS.items():
        name = next(iter(container_names(svc)))
        got_tar = subprocess.run(container_cli() + ["cp", f"{name}:/keys/.", "-"], capture_output=True, timeout=60,
                                 stdin=subprocess.DEVNULL)
        if got_tar.returncode != 0:
            raise Failed(f"cp {name}:/keys exited {got_tar.returncode}: {got_tar.stderr.decode(errors='replace')[-400:]}")
        tar = got_tar.stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            got = " ".join(sorted({m.name.removeprefix("./").split("/")[0] for m in t.getmembers()} - {".", ""}))
        if got != want:
            raise Failed(f"{svc} sees /keys = {got!r}; its role holds {want!r} (royalefleet/key_roles.py)")
    for svc in ROLE_KEYS:
        name = next(iter(container_names(svc)))
        ro = run(container_cli() + ["inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", name], quiet=True).stdout
        if ro.strip() != "true":
            raise Failed(f"{svc}'s root filesystem is writable ({ro.strip()!r}); compose.yaml says read_only")
    log("keys per role: " + "; ".join(f"{svc} /keys = {want}" for svc, want in ROLE_KEYS.items())
        + "; their root filesystems are read-only")


def fleet_function() -> str:
    """The ``fleet`` shell function of docs/compose.md ("royalefleet commands against a Compose
    run"), as a user copies it, pointed at this test's project (its volumes are named
    ``royalefleet-it_*``) and run with podman (the docs' own advice where there is no docker)."""
    text = open(os.path.join(ROOT, "docs", "compose.md")).read()
    m = re.search(r"^fleet\(\) \{\n.*?^\}\n", text, re.S | re.M)
    if not m:
        raise Failed("docs/compose.md has no `fleet() { ... }` function")
    body = m.group(0).replace("royalefleet_", f"{PROJECT}_")
    return body.replace("docker run", " ".join(container_cli()) + " run")


# ----------------------------------------------------------------------------- the stack


TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d:\d\d)\s?(.*)$")
# podman 4.3's log API stamps a partial line (Python writes the text and the newline apart) and
# its newline separately: "<ts> text<ts> ". The trailing stamp is not part of the line.
TRAILING_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)\s*$")


def parse_ts(stamp: str, zone: str) -> float:
    whole, _, frac = stamp.partition(".")
    t = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone)).timestamp()
    return t + (float("0." + frac) if frac else 0.0)


def container_log(name: str) -> list[tuple[float, str]]:
    """(unix time, line) of a container's output, oldest first."""
    got = run(container_cli() + ["logs", "-t", name], quiet=True, timeout=60)
    lines = []
    for raw in (got.stdout + "\n" + got.stderr).splitlines():  # the container's stdout, stderr
        m = TS.match(raw)
        if m:
            text = TRAILING_TS.sub("", m.group(3)).rstrip()
            if text:
                lines.append((parse_ts(m.group(1), m.group(2)), text))
    lines.sort(key=lambda tl: tl[0])  # stable: stdout and stderr interleaved by time
    return lines


def container_names(service: str) -> dict[str, str]:
    """name -> full id of the service's containers (running or not)."""
    out = compose("ps", "-a", "--format", "{{.Name}} {{.ID}}", service, quiet=True).stdout
    names = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            names[parts[0]] = parts[1]
    return names


def learner_name() -> str:
    names = list(container_names("learner"))
    if len(names) != 1:
        raise Failed(f"expected one learner container, got {names}")
    return names[0]


PROGRESS = re.compile(r"^it\s+(\d+) \|")


def learner_lines() -> list[tuple[float, str]]:
    return container_log(learner_name())


def progress(lines) -> list[tuple[float, int]]:
    return [(t, int(m.group(1))) for t, line in lines if (m := PROGRESS.match(line))]


def rows(workdir: str) -> list[dict]:
    """The learner's metrics.jsonl, copied out of its container (no exec: nothing lingers)."""
    dest = os.path.join(workdir, "metrics.jsonl")
    if os.path.exists(dest):
        os.remove(dest)
    run(container_cli() + ["cp", f"{learner_name()}:{RUN_DIR}/metrics.jsonl", dest], quiet=True, timeout=60)
    with open(dest) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def results(workdir: str) -> list[dict]:
    """The ladder's result log (one line per finished seat-episode), copied out of its container."""
    names = list(container_names("ladder"))
    if len(names) != 1:
        raise Failed(f"expected one ladder container, got {names}")
    dest = os.path.join(workdir, "results.jsonl")
    if os.path.exists(dest):
        os.remove(dest)
    run(container_cli() + ["cp", f"{names[0]}:{RUN_DIR}/ladder/results.jsonl", dest], quiet=True, timeout=60)
    with open(dest) as fh:
        return [json.loads(line)["record"] for line in fh if line.strip()]


def episodes_across_restart(records: list[dict], last: int, cycles: int) -> tuple[list[str], int]:
    """(problems, continued) for the result log around a learner restart after iteration ``last``:
    an episode (battle, ordinal, seat) reported twice, or a battle whose ordinals after the
    restart go back to one reported before it, is a problem; ``continued`` counts episodes ending
    after the restart with more decisions than were played since it (``cycles`` a row), which
    only an episode carried over in the checkpoint's battle states can have."""
    problems, seen, before = [], set(), {}
    continued = 0
    for r in records:
        key = (r["battle"], r["ordinal"], r["seat"])
        if key in seen:
            problems.append(f"battle {key[0]} ordinal {key[1]} {key[2]} reported twice")
        seen.add(key)
        if r["iteration"] <= last:
            before[r["battle"]] = max(before.get(r["battle"], -1), r["ordinal"])
    for r in records:
        if r["iteration"] > last:
            if r["ordinal"] <= before.get(r["battle"], -1):
                problems.append(f"battle {r['battle']} reported ordinal {r['ordinal']} in iteration {r['iteration']} "
                                f"after the restart; it had reached {before[r['battle']]} before it")
            if r["episode_steps"] > cycles * (r["iteration"] - last):
                continued += 1
    return problems, continued


EXAMPLE_CONFIG = "tiny-example-reward.json"
EXAMPLE_PER_TICK = 0.01  # deploy/config/tiny-example-reward.json's fleet_example_bot.rewards.TickReward
TICKS_PER_DECISION = 10  # the tiny profile's 500 ms decision


def user_reward_problems(records: list[dict]) -> list[str]:
    """Every episode whose return is not the example package's reward: ``per_tick`` for each
    tick, so exactly ``EXAMPLE_PER_TICK * 10 * episode_steps`` (to float rounding), whoever won;
    the shipped reward pays nothing per tick. Also a problem: no episode at all."""
    if not records:
        return ["the result log holds no episode"]
    out = []
    for r in records:
        want = EXAMPLE_PER_TICK * TICKS_PER_DECISION * r["episode_steps"]
        if abs(r["undiscounted_return"] - want) > 1e-9 * max(1.0, want):
            out.append(f"battle {r['battle']} ordinal {r['ordinal']} {r['seat']}: return {r['undiscounted_return']!r} "
                       f"over {r['episode_steps']} decisions, the example reward pays {want!r}")
    return out


def prom_query(port: int, query: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            doc = json.load(r)
    except OSError as exc:
        raise Failed(f"Prometheus: {exc}") from exc
    if doc.get("status") != "success":
        raise Failed(f"Prometheus: {doc}")
    return doc["data"]["result"]


def diagnostics() -> None:
    log("diagnostics: state of the stack")
    try:
        print(compose("ps", "-a", check=False, quiet=True).stdout, flush=True)
        for svc in ("keys", "checkpoint", "ladder", "learner", "rollout", "evaluator", "prometheus", "alertmanager"):
            for name in container_names(svc):
                got = run(container_cli() + ["logs", "--tail", "40", name], check=False, quiet=True)
                out = got.stdout + got.stderr
                print(f"----- {name} (last 40 lines)\n{out}", flush=True)
    except Exception as exc:  # diagnostics must never hide the failure
        print(f"(diagnostics failed: {exc})", flush=True)


# ----------------------------------------------------------------------------- cleanup


def images_now() -> dict[str, str]:
    """id -> first RootFS layer of every image in the store (intermediates too)."""
    out = podman("images", "-a", "--no-trunc", "--format", "{{.ID}}", quiet=True).stdout.split()
    ids = sorted(set(i.removeprefix("sha256:") for i in out))
    if not ids:
        return {}
    fmt = "{{.Id}} {{if .RootFS.Layers}}{{index .RootFS.Layers 0}}{{end}}"
    got = podman("image", "inspect", "--format", fmt, *ids, check=False, quiet=True).stdout
    layers = {}
    for line in got.splitlines():
        parts = line.split()
        if parts:
            layers[parts[0].removeprefix("sha256:")] = parts[1] if len(parts) > 1 else ""
    return layers


def remove_images(ids: list[str]) -> list[str]:
    """podman rmi, children before parents (newest first), until no progress; returns leftovers."""
    left = list(ids)
    for _ in range(len(ids) + 1):
        if not left:
            break
        created = {}
        for i in left:
            out = podman("image", "inspect", "--format", "{{.Created.Unix}}", i, check=False, quiet=True)
            if out.returncode == 0:
                created[i] = int(out.stdout.strip() or 0)
        left = sorted(created, key=lambda i: -created[i])
        progress_made = False
        for i in list(left):
            if podman("rmi", i, check=False, quiet=True).returncode == 0:
                left.remove(i)
                progress_made = True
        if not progress_made:
            break
    return left


def project_leftovers() -> list[str]:
    label = f"label=com.docker.compose.project={PROJECT}"
    found = []
    for kind, argv in (("container", ["ps", "-a", "-q", "--filter", label]),
                       ("volume", ["volume", "ls", "-q", "--filter", label]),
                       ("network", ["network", "ls", "-q", "--filter", f"name=^{PROJECT}_"])):
        out = podman(*argv, check=False, quiet=True).stdout.split()
        found += [f"{kind} {x}" for x in out]
    return found


def conmons_of_project() -> list[str]:
    out = run(["ps", "-eo", "pid,args"], quiet=True).stdout.splitlines()
    return [line.strip()[:120] for line in out if "conmon" in line and f"-n {PROJECT}-" in line]


def helpers_cpu(work: str) -> None:
    """CPU seconds the two helpers used (their own and their finished children's)."""
    tick = os.sysconf("SC_CLK_TCK")
    parts = []
    for name, pidfile in (("API service", "service.pid"), ("health ticker", "ticker.pid")):
        try:
            pid = open(os.path.join(work, pidfile)).read().strip()
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            parts.append(f"{name} {sum(int(x) for x in fields[11:15]) / tick:.0f} s")
        except (OSError, ValueError, IndexError):
            pass
    if parts:
        log(f"helpers' CPU over the test: {', '.join(parts)} (wall {time.monotonic() - T0:.0f} s)")


# ----------------------------------------------------------------------------- main


def main() -> int:
    if os.geteuid() != 0:
        print("compose integration test: run as root (apt, debootstrap, rootful podman)", file=sys.stderr)
        return 2

    def interrupted(signum, _frame):
        raise Interrupted(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)

    work = tempfile.mkdtemp(prefix="royalefleet-it.")
    os.chdir(ROOT)
    state = {"base_made": False, "helpers": False, "images_before": None, "up": False}
    prom_port, learner_port = free_port(), free_port()
    settings = {
        # A user reward from a package of the test's own (docs/compose.md "Your own code in the
        # images"): built into both images, named by the config, digested by the rollouts' Hello.
        "FLEET_CONFIG": EXAMPLE_CONFIG, "FLEET_USER_CODE": "deploy/podman/example_user",
        "FLEET_USER_PACKAGES": "fleet_example_bot",
        "FLEET_ROLLOUTS": "2", "FLEET_BATTLES": "4", "FLEET_SHARDS": "2",
        "FLEET_LEARNER_THREADS": "1", "FLEET_ITERATIONS": "0",
        "FLEET_LEARNER_PUBLISH": f"127.0.0.1:{learner_port}", "PROMETHEUS_PORT": str(prom_port),
        "ALERTMANAGER_PORT": str(free_port()), "COMPOSE_PROFILES": "monitoring",
        "BASE_IMAGE": BASE_IMAGE,
        # compose.yaml requires it on every command (no default admin password); one of the
        # test's own, never printed.
        "GRAFANA_ADMIN_PASSWORD": secrets.token_urlsafe(18),
    }
    failure = None
    try:
        with phase("setup", "podman, debootstrap, Docker Compose v2 (idempotent)"):
            script("setup.sh", work, capture=False, timeout=900)
            env = script("service.sh", "env", work, quiet=True).stdout
            for key, value in re.findall(r"(\w+)='?([^'\s]*)'?", env.split("export", 1)[1]):
                os.environ[key] = value
            os.environ.update(settings)
            os.environ["ROYALEFLEET_PODMAN_DIR"] = work  # deploy/podman/compose's state folder
            log("compose settings: " + " ".join(f"{k}={v}" for k, v in settings.items() if "PASSWORD" not in k))

        with phase("base", f"BASE_IMAGE {BASE_IMAGE}"):
            if podman("image", "exists", BASE_IMAGE, check=False, quiet=True).returncode == 0:
                log(f"{BASE_IMAGE} is already here: used as it is, and kept")
            else:
                script("make-base-image.sh", BASE_IMAGE, capture=False, timeout=1200)
                state["base_made"] = True

        with phase("helpers", "the Docker API on a socket and the health ticker"):
            state["helpers"] = True
            script("service.sh", "start", work)
            compose("version")

        with phase("build", "docker compose build (one image at a time: COMPOSE_PARALLEL_LIMIT=1)"):
            state["images_before"] = set(images_now())
            marks: dict[str, list[float]] = {}

            def build_line(line: str) -> None:
                m = re.match(r"\s*Service (\S+)\s+(Building|Built)", line)
                if m:
                    marks.setdefault(m.group(1), []).append(time.monotonic())

            compose("build", capture=False, timeout=3600, on_line=build_line)
            log("build times: " + ", ".join(f"{svc} {t[-1] - t[0]:.0f} s" for svc, t in marks.items() if len(t) > 1)
                + " (services naming an image already built reuse its cached layers)")
            du = run(["du", "-sh", "/var/lib/containers/storage"], check=False, quiet=True).stdout.split()
            if du:
                log(f"container storage after the build: {du[0]} (du -sh /var/lib/containers/storage)")
            helpers_cpu(work)

        services = [s for s in compose("config", "--services", quiet=True).stdout.split() if s not in NOT_RUN]
        with phase("up", f"docker compose up -d ({', '.join(services)}; 2 rollouts)"):
            state["up"] = True
            compose("up", "-d", *services, capture=False, timeout=900)
            rollouts = container_names("rollout")
            if len(rollouts) != 2:
                raise Failed(f"expected 2 rollout containers, got {sorted(rollouts)}")
            check_role_keys()

        with phase("train", "the learner's first finished iteration"):
            first = wait_for("the learner's first progress line `it 1 | ...`",
                             lambda: progress(learner_lines()), timeout=420)
            lines = learner_lines()
            run_ids = [m.group(1) for _, line in lines if (m := re.search(r"\brun id ([0-9a-f]{16})\b", line))]
            if not run_ids:
                raise Failed("the learner printed no `run id <16 hex>` line")
            run_id = run_ids[0]
            log(f"learner: run id {run_id}; iteration {first[0][1]} finished; {first[-1][1]} so far")
            first_rows = rows(work)
            if not first_rows or first_rows[0]["run/run_id"] != run_id:
                raise Failed(f"metrics.jsonl does not start with a row of run {run_id}: {first_rows[:1]}")
            if first_rows[0]["health/rollouts"] != 2:
                raise Failed(f"the first iteration ran with {first_rows[0]['health/rollouts']} rollouts, not 2")

        with phase("prometheus", "the learner's row gauges and 2 rollout targets (DNS discovery)"):
            def learner_gauge():
                got = prom_query(prom_port, "royalefleet_learner_run_iteration")
                return got and float(got[0]["value"][1]) >= 1 and got

            got = wait_for("royalefleet_learner_run_iteration >= 1 in Prometheus", learner_gauge, timeout=90)
            log(f"prometheus: royalefleet_learner_run_iteration = {got[0]['value'][1]} ({got[0]['metric']['instance']})")
            names = {r["metric"]["__name__"] for r in prom_query(prom_port, '{__name__=~"royalefleet_learner_.+"}')}
            for want in ("royalefleet_learner_run_timesteps", "royalefleet_learner_health_rollouts",
                         "royalefleet_learner_health_rollouts_lost", "royalefleet_learner_health_rows_invalid"):
                if want not in names:
                    raise Failed(f"Prometheus has no {want} (it has {len(names)} learner series: {sorted(names)[:12]} ...)")
            log(f"prometheus: {len(names)} royalefleet_learner_* series")

            def two_rollouts():
                got = prom_query(prom_port, 'up{job="rollout"}')
                up = sorted(r["metric"]["instance"] for r in got if r["value"][1] == "1")
                return len(up) == 2 and up

            up = wait_for("2 rollout targets up (job rollout, DNS A records of `rollout`)", two_rollouts, timeout=120)
            log(f"prometheus: rollout targets up: {', '.join(up)}")

            def alertmanager():
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/alertmanagers", timeout=5) as r:
                        active = json.load(r)["data"]["activeAlertmanagers"]
                except OSError as exc:
                    raise Failed(f"Prometheus: {exc}") from exc
                return active and [a["url"] for a in active]

            got = wait_for("Prometheus's Alertmanager (prometheus.yml alerting:) active", alertmanager, timeout=60)
            log(f"prometheus: sends alerts to {', '.join(got)}")

        with phase("kill", "docker kill one rollout; the loss is counted, training goes on"):
            victim = sorted(container_names("rollout"))[-1]
            before = rows(work)[-1]["run/iteration"]
            run(container_cli() + ["kill", victim])
            t_kill = time.time()

            def loss_row():
                return [r for r in rows(work) if r["run/iteration"] > before and r["health/rollouts_lost"] >= 1]

            lossy = wait_for("a row counting the killed rollout (health/rollouts_lost >= 1)", loss_row, timeout=120)[0]
            if lossy["health/rows_invalid"] <= 0:
                raise Failed(f"iteration {lossy['run/iteration']}: rollouts_lost {lossy['health/rollouts_lost']} "
                             f"but rows_invalid {lossy['health/rows_invalid']}")
            log(f"killed {victim} after iteration {before}: iteration {lossy['run/iteration']} counts "
                f"health/rollouts_lost={lossy['health/rollouts_lost']}, health/rows_invalid={lossy['health/rows_invalid']}")
            lost_line = [line for _, line in learner_lines() if PROGRESS.match(line)
                         and int(PROGRESS.match(line).group(1)) == lossy["run/iteration"]]
            if not lost_line or "| lost " not in lost_line[-1]:
                raise Failed(f"the progress line of iteration {lossy['run/iteration']} does not say `lost`: {lost_line}")

            def two_more():
                later = [r for r in rows(work) if r["run/iteration"] > lossy["run/iteration"]]
                return len(later) >= 2 and later

            later = wait_for("two more iterations after the loss", two_more, timeout=120)
            log(f"training goes on: iterations {later[0]['run/iteration']}..{later[-1]['run/iteration']} with "
                f"{later[-1]['health/rollouts']} rollout(s), {time.time() - t_kill:.0f} s after the kill")

        with phase("scale", "docker compose up -d --scale rollout=3; the newcomer joins"):
            old = set(container_names("rollout").values())
            # --no-recreate: podman 4.3 reports network names where Compose expects network ids,
            # so Compose would otherwise recreate every running replica (docs: "Under podman").
            compose("up", "-d", "--no-deps", "--no-recreate", "--scale", "rollout=3", "rollout", capture=False)
            now = container_names("rollout")
            new = {n: i for n, i in now.items() if i not in old}
            if len(now) != 3 or len(new) != 1:
                raise Failed(f"after --scale rollout=3: {sorted(now)} (new: {sorted(new)})")
            (newcomer, new_id), = new.items()
            host = new_id[:12]

            def registered():
                return [(t, line) for t, line in learner_lines() if "registered" in line and f"@{host}:" in line]

            t_reg, reg_line = wait_for(f"the learner to register {newcomer}", registered, timeout=120)[0]
            log(f"learner says: {reg_line}")

            def ready_time():
                got = [t for t, line in container_log(newcomer) if "welcomed" in line]
                return got[0] if got else None

            t_ready = wait_for(f"{newcomer} to build its battles (`welcomed`)", ready_time, timeout=120)

            def three():
                return [r for r in rows(work) if r["health/rollouts"] == 3]

            joined = wait_for("a row with health/rollouts == 3", three, timeout=120)[0]
            # Membership changes only at an iteration boundary, and the learner waits there
            # (boundedly) for a rollout that is still building its battles. So a rollout registered
            # after iteration k finished is in iteration k + 1, or k + 2 when its Hello was read
            # during k + 1's collection.
            ends = progress(learner_lines())
            done_before = max((n for t, n in ends if t <= t_reg), default=0)
            j = joined["run/iteration"]
            log(f"{newcomer}: registered after iteration {done_before} finished, battles built "
                f"{t_ready - t_reg:.1f} s later; 3 rollouts from iteration {j} on")
            if j > done_before + 2:
                raise Failed(f"{newcomer} registered after iteration {done_before} but the first row with 3 "
                             f"rollouts is iteration {j}: it should join at the next boundary "
                             f"(iteration {done_before + 1}, or {done_before + 2} if it registered mid-iteration)")

        with phase("restart", "docker compose stop learner / start learner: resume, same run id"):
            n_before = len([1 for _, line in learner_lines() if re.search(r"\brun id ", line)])
            t_stop = time.monotonic()
            compose("stop", "learner")
            log(f"learner stopped in {time.monotonic() - t_stop:.1f} s")
            state_out = run(container_cli() + ["inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}",
                                               learner_name()], quiet=True).stdout.split()
            if state_out != ["exited", "0"]:
                raise Failed(f"the learner did not stop cleanly: {state_out}")
            stopped_rows = rows(work)
            last = stopped_rows[-1]["run/iteration"]
            saved = [line for _, line in learner_lines() if f"checkpoint of iteration {last} written" in line]
            if not saved:
                raise Failed(f"no `checkpoint of iteration {last} written` line before the stop")
            log(f"last row before the stop: iteration {last}; {saved[-1]}")
            compose("start", "learner")

            def resumed():
                lines = learner_lines()
                ids = [m.group(1) for _, line in lines if (m := re.search(r"\brun id ([0-9a-f]{16})\b", line))]
                res = [line for _, line in lines if "resumed iteration" in line]
                return len(ids) > n_before and res and (ids[-1], res[-1])

            new_id_, res_line = wait_for("`resumed iteration N` after the restart", resumed, timeout=300)
            log(f"learner says: {res_line}")
            if new_id_ != run_id:
                raise Failed(f"the restarted learner has run id {new_id_}, not {run_id}")
            m = re.search(r"resumed iteration (\d+)", res_line)
            if int(m.group(1)) != last:
                raise Failed(f"resumed iteration {m.group(1)}, but the last row before the stop was {last}")

            def next_row():
                got = [r for r in rows(work) if r["run/iteration"] == last + 1]
                return got and got[0]

            row = wait_for(f"iteration {last + 1} after the restart", next_row, timeout=300)
            if row["run/run_id"] != run_id:
                raise Failed(f"iteration {last + 1} has run id {row['run/run_id']}, not {run_id}")
            log(f"learner resumed at iteration {last} with run id {run_id}; iteration {last + 1} finished "
                f"({row['health/rollouts']} rollouts)")
            # The battles went on too (services/learner/battle_states.py): the first row after the
            # restart counts the battles that continued their recorded episodes, and the result
            # log's episode ordinals neither repeat nor start again.
            restored = row.get("resume/battles_restored", 0)
            afresh = row.get("resume/battles_refused", 0) + row.get("resume/battles_missing", 0)
            if not restored or afresh:
                raise Failed(f"iteration {last + 1} after the restart: {restored} battle(s) continued their recorded "
                             f"episodes, {afresh} started afresh (resume/ keys of its row); every battle should continue")
            records = results(work)
            problems, continued = episodes_across_restart(records, last, row["run/cycles"])
            if problems:
                raise Failed("episode ordinals across the restart: " + "; ".join(problems[:5]))
            unpaid = user_reward_problems(records)
            if unpaid:
                raise Failed("the rollouts did not pay the example package's reward: " + "; ".join(unpaid[:5]))
            log(f"all {len(records)} episodes in the result log paid fleet_example_bot.rewards.TickReward "
                f"({EXAMPLE_PER_TICK} a tick): the user package reached both images")
            log(f"{restored} battle(s) continued their episodes ({row.get('resume/battles_unheld', 0)} unheld); "
                f"{continued} episode(s) ending after the restart began before it; no ordinal repeated")

        with phase("tools", "docs/compose.md's fleet(): `status` and `checkpoints` against the volumes"):
            for command, expect in (("status", [r"progress   iteration (\d+):", r"checkpoint iteration \d+",
                                                r"halt       none"]),
                                    ("checkpoints", [r"ok \(every file verifies\)"])):
                log(f"$ fleet {command}   (the function of docs/compose.md)")
                done = run(["bash", "-c", fleet_function() + f"\nfleet {command}"], quiet=True, timeout=180)
                out = done.stdout
                for pattern in expect:
                    if not re.search(pattern, out):
                        raise Failed(f"`fleet {command}` (exit {done.returncode}) printed no line matching "
                                     f"{pattern!r}:\n{out}\nits stderr:\n{done.stderr}")
                log(f"fleet {command}: " + " | ".join(line.strip() for line in out.splitlines()[:4]))
            at = int(re.search(r"progress   iteration (\d+):", run(
                ["bash", "-c", fleet_function() + "\nfleet status"], quiet=True, timeout=180).stdout).group(1))
            if at < last + 1:
                raise Failed(f"`fleet status` says iteration {at}; the run is past {last + 1}")
    except Interrupted as exc:
        failure = f"interrupted ({exc})"
    except Failed as exc:
        failure = str(exc)
    except Exception as exc:  # a bug in the test itself: still clean up
        failure = f"{type(exc).__name__}: {exc}"
    if failure:
        log(f"FAILED: {failure}")
        if state["up"]:
            diagnostics()

    # ------------------------------------------------------------------------- teardown
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    leftovers: list[str] = []
    with phase("down", "docker compose down; nothing left behind"):
        if state["helpers"]:
            args = ["down", "-v", "--remove-orphans"] + ([] if KEEP_IMAGES else ["--rmi", "all"])
            out = compose(*args, check=False, timeout=600)
            if out.returncode != 0:
                leftovers.append(f"`docker compose down` exited {out.returncode}")
            leftovers += project_leftovers()
            if not KEEP_IMAGES and state["images_before"] is not None:
                layers = images_now()
                base_layer = layers.get(podman("image", "inspect", "--format", "{{.Id}}", BASE_IMAGE,
                                               check=False, quiet=True).stdout.strip().removeprefix("sha256:"))
                ours = [i for i, first in layers.items() if i not in state["images_before"]
                        and (base_layer is None or first == base_layer)]
                if ours:
                    log(f"removing {len(ours)} intermediate image(s) of the build")
                left = remove_images(ours)
                leftovers += [f"image {i[:12]}" for i in left]
                for name in BUILT_IMAGES:
                    if podman("image", "exists", name, check=False, quiet=True).returncode == 0:
                        leftovers.append(f"image {name}")
        if state["base_made"] and not KEEP_IMAGES:
            if podman("rmi", BASE_IMAGE, check=False).returncode != 0:
                leftovers.append(f"image {BASE_IMAGE}")
        if state["helpers"]:
            helpers_cpu(work)
            script("service.sh", "stop", work, check=False)
            for pidfile in ("service.pid", "ticker.pid"):
                if os.path.exists(os.path.join(work, pidfile)):
                    leftovers.append(f"helper {pidfile}")
        deadline = time.monotonic() + 30
        while conmons_of_project() and time.monotonic() < deadline:
            time.sleep(1)
        leftovers += [f"process {p}" for p in conmons_of_project()]
        shutil.rmtree(work, ignore_errors=True)
        if leftovers:
            log("left behind: " + "; ".join(leftovers))
        else:
            log("nothing left behind: no container, volume or network of the project, "
                + ("no image it built, " if not KEEP_IMAGES else "images kept (KEEP_IMAGES), ")
                + "no helper process, no scratch folder")

    total = time.monotonic() - T0
    print("\ncompose integration test: phase times", flush=True)
    for name, dt in PHASES:
        print(f"  {name:<22} {dt:7.1f} s", flush=True)
    print(f"  {'total':<22} {total:7.1f} s", flush=True)
    if failure or leftovers:
        print(f"compose integration test: FAILED: {failure or 'left things behind'}", flush=True)
        return 1
    print("compose integration test: passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
