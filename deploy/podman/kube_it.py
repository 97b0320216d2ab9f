#!/usr/bin/env python3
"""The kube play integration test: deploy/k8s/base (the ``tiny`` profile), as generated, brought
up with `podman kube play`, trained, and two of its pods deleted as Kubernetes would delete them.

    deploy/podman/kube-integration-test.sh       # as root; .ci/run runs it after the Compose test

Phases (each timed; the times are printed as it goes and in a table at the end):

  setup      podman and its helpers (deploy/podman/setup.sh, idempotent)
  base       BASE_IMAGE from debootstrap (deploy/podman/make-base-image.sh), unless present
  build      the two images the manifests name, `podman build --target learner|rollout`
  manifests  deploy/k8s/base translated for podman 4.3 (deploy/podman/kube_manifests.py says
             what changes and why) into one multi-document YAML; the CURVE keys from
             `royalefleet keys --k8s-secrets` as podman secrets
  up         `podman kube play --network <DNS network> base.yaml`: every pod of the base
  train      the learner's rows of iterations 1 and 2
  rollout    the rollout pod deleted (`podman stop -t <its grace>` of its container, as the
             kubelet signals it, then `pod rm`) and played again, as its Deployment would replace
             it: it registers, sends rounds (its own /metrics), two more iterations finish, and no
             iteration is lost (rows 1..N, each once, one run id)
  learner    the learner pod deleted the same way (SIGTERM, then its 180 s grace): the
             checkpoint of its last row is written after the SIGTERM and before the grace
             ends (the time is printed), it exits 0; played again (the claim's volume kept),
             it resumes that iteration with the same run id and writes the next row
  down       every pod, volume, podman secret and the network of the test removed; the images
             it built (intermediates too) and the base image if it made it, unless KEEP_IMAGES

One change beyond podman's needs, as a user's kustomization would make it: the learner saves a
checkpoint every 5 iterations (``tiny`` saves every one), so the SIGTERM finds a row not yet
saved and the checkpoint the phase times is the one the stop writes.

Environment: KEEP_IMAGES=1 keeps the built images and the base image (faster reruns);
IT_TIMEOUT_SCALE multiplies every wait (slow machines); IT_BUILD_CONTEXT builds the images from
another folder than this checkout (a `git archive HEAD` export while the tree is mid-edit). Needs root and the repository's venv
(PyYAML, and `royalefleet keys`): run it with .venv/bin/python.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compose_it as it  # noqa: E402  (the Compose test's log, phases, commands and cleanup)
import kube_manifests as km  # noqa: E402
from compose_it import Failed, Interrupted, log, phase, podman, wait_for  # noqa: E402

NETWORK = "royalefleet-kube-it"
RUN_DIR = "default"  # the run folder's name in each volume (run_name "default")
CHECKPOINT_EVERY = 5
IT_CONFIG = "kube-it.json"
ROLLOUT, LEARNER = "rollout", "learner"


# ----------------------------------------------------------------------------- what is played


def with_checkpoint_every(workloads: list[km.Workload], every: int) -> str:
    """Add ``IT_CONFIG`` (the base's config with ``checkpoint.every_iterations = every``) to the
    ConfigMap and point every ``ROYALEFLEET_CONFIG`` at it; returns the base's config file."""
    base_files = set()
    for w in workloads:
        for c in _containers(w):
            for e in c.get("env", []):
                if e["name"] == "ROYALEFLEET_CONFIG":
                    base_files.add(os.path.basename(e["value"]))
                    e["value"] = os.path.join(os.path.dirname(e["value"]), IT_CONFIG)
    if len(base_files) != 1:
        raise Failed(f"the base's pods name {sorted(base_files)} as ROYALEFLEET_CONFIG; expected one file")
    base_file, = base_files
    for w in workloads:
        for d in w.docs:
            if d["kind"] == "ConfigMap" and base_file in d.get("data", {}):
                cfg = json.loads(d["data"][base_file])
                cfg["checkpoint"] = {**cfg.get("checkpoint", {}), "every_iterations": every}
                d["data"][IT_CONFIG] = json.dumps(cfg, indent=2) + "\n"
    return base_file


def _containers(w: km.Workload) -> list[dict]:
    body = next(d for d in w.docs if d["kind"] in ("Pod", "Deployment"))
    return (body["spec"] if body["kind"] == "Pod" else body["spec"]["template"]["spec"])["containers"]


def make_secrets(workloads: list[km.Workload], work: str) -> list[str]:
    """`royalefleet keys --k8s-secrets` into podman secrets, one per name the pods use; returns
    the names made. Fails naming a Secret a pod needs that the keys do not make (only an
    optional ``secretKeyRef`` may be absent: the halt token)."""
    out = it.run([sys.executable, "-m", "royalefleet", "keys", "--dir", os.path.join(work, "keys"), "--k8s-secrets"],
                 quiet=True).stdout
    made = {s["metadata"]["name"]: s for s in json.loads(out)["items"]}
    names = []
    for w in workloads:
        for name, (source, keys) in w.secrets.items():
            if name in names:
                continue
            if source not in made:
                if _optional_env_only(w, source):
                    continue
                raise Failed(f"{w.name} needs Secret {source}; `royalefleet keys --k8s-secrets` makes {sorted(made)}")
            path = os.path.join(work, f"secret-{name}.yaml")
            with open(path, "w") as fh:
                fh.write(km.podman_secret(made[source], keys, name))
            podman("secret", "create", name, path, quiet=True)
            os.remove(path)
            names.append(name)
    log(f"podman secrets from `royalefleet keys --k8s-secrets`: {', '.join(names)}")
    return names


def _optional_env_only(w: km.Workload, secret: str) -> bool:
    refs = [e["valueFrom"]["secretKeyRef"] for c in _containers(w) for e in c.get("env", [])
            if e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == secret]
    return bool(refs) and all(r.get("optional") for r in refs)


# ----------------------------------------------------------------------------- reading the run


def pod_log(container: str) -> list[tuple[float, str]]:
    """(unix time, line) of a container's output, oldest first."""
    got = it.run(["podman", "logs", "-t", container], quiet=True, timeout=60)
    lines = []
    for raw in (got.stdout + "\n" + got.stderr).splitlines():
        m = it.TS.match(raw)
        if m:
            text = it.TRAILING_TS.sub("", m.group(3)).rstrip()
            if text:
                lines.append((it.parse_ts(m.group(1), m.group(2)), text))
    lines.sort(key=lambda tl: tl[0])
    return lines


def volume_path(volume: str) -> str:
    return podman("volume", "inspect", "--format", "{{.Mountpoint}}", volume, quiet=True).stdout.strip()


def rows() -> list[dict]:
    """The learner's metrics.jsonl, read from its claim's volume (whether or not a pod runs)."""
    path = os.path.join(volume_path("runs-learner-0"), RUN_DIR, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def contiguous(got: list[dict], run_id: str) -> list[str]:
    """Problems with the rows as one run: iterations 1..N each once, all of run ``run_id``."""
    its = [r["run/iteration"] for r in got]
    problems = []
    if its != list(range(1, len(its) + 1)):
        problems.append(f"iterations {its} are not 1..{len(its)} each once")
    other = sorted({r["run/run_id"] for r in got} - {run_id})
    if other:
        problems.append(f"rows of run ids {other} besides {run_id}")
    return problems


def run_ids(lines) -> list[str]:
    return [m.group(1) for _, line in lines if (m := re.search(r"\brun id ([0-9a-f]{16})\b", line))]


def play(path: str, timeout: float = 300) -> None:
    it.run(["podman", "kube", "play", "--network", NETWORK, path], timeout=timeout, capture=False)


def stop_app(w: km.Workload) -> tuple[float, float]:
    """The first half of a pod deletion as the kubelet does it: SIGTERM to the pod's container,
    its grace, then SIGKILL (`podman stop -t`), while the pod's infra container (Kubernetes'
    pause container) keeps its network up. (`podman pod stop` would stop the infra container
    with it: the learner's last checkpoint save then finds no network.) Returns (unix time just
    before the stop, seconds the stop took)."""
    t0 = time.time()
    podman("stop", "-t", str(w.grace_s), w.container, timeout=w.grace_s + 60)
    return t0, time.time() - t0


def pod_ip(w: km.Workload) -> str:
    """The pod's address on the test's network (its infra container's)."""
    infra = podman("pod", "inspect", "--format", "{{.InfraContainerID}}", w.pod, quiet=True).stdout.strip()
    return podman("inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", infra,
                  quiet=True).stdout.strip()


def remove_pod(w: km.Workload) -> None:
    podman("pod", "rm", "-f", "-t", "0", w.pod, timeout=120)


def metric(w: km.Workload, name: str) -> float | None:
    """A value of the pod's /metrics (read inside it: no port is published), None when absent."""
    port = next(e["value"] for c in _containers(w) for e in c.get("env", []) if e["name"] == "ROYALEFLEET_METRICS_PORT")
    code = f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics', timeout=5).read().decode())"
    got = podman("exec", w.container, "python", "-c", code, check=False, quiet=True, timeout=30)
    m = re.search(rf"^{re.escape(name)} (\S+)$", got.stdout, re.M)
    return float(m.group(1)) if m else None


# ----------------------------------------------------------------------------- phases


def exists(kind: str, name: str) -> bool:
    """Whether podman has the pod, volume, network or secret ``name`` (4.3 has no `secret exists`)."""
    argv = ["secret", "inspect", name] if kind == "secret" else [kind, "exists", name]
    return podman(*argv, check=False, quiet=True).returncode == 0


def preflight(workloads: list[km.Workload]) -> dict[str, list[str]]:
    """The pods, volumes, podman secrets and network the test will make; Failed when one of
    them is already there (a deployment of someone else's: the test touches nothing of it)."""
    ours = {"pod": [w.pod for w in workloads],
            "volume": sorted({v for w in workloads for v in w.claims + list(w.secrets)} | {"royalefleet-config"}),
            "secret": sorted({s for w in workloads for s in w.secrets}),
            "network": [NETWORK]}
    there = [f"{kind} {name}" for kind, names in ours.items() for name in names if exists(kind, name)]
    if there:
        raise Failed("already on this host, and the test would make them: " + ", ".join(there)
                     + " (`podman kube down` of a play of deploy/k8s, or remove them by hand)")
    return ours


def phase_train(state: dict) -> None:
    got = wait_for("rows of iterations 1 and 2 in runs-learner-0", lambda: len(rows()) >= 2 and rows(), timeout=420)
    lines = pod_log(state["learner"].container)
    ids = run_ids(lines)
    if not ids:
        raise Failed("the learner printed no `run id <16 hex>` line")
    state["run_id"] = ids[0]
    problems = contiguous(got, ids[0])
    if problems:
        raise Failed("; ".join(problems))
    off = [line for _, line in lines if "no TensorBoard curves" in line]
    if off:
        raise Failed(f"the learner pod cannot write its curves: {off[0]}")
    two = it.progress(lines)
    at2 = next((t for t, n in two if n == 2), None)
    log(f"learner: run id {ids[0]}; iteration 2 finished "
        + (f"{at2 - state['t_play']:.1f} s after `kube play` began " if at2 else "")
        + f"with {got[1]['health/rollouts']} rollout(s); {len(got)} row(s) so far")


def phase_rollout(state: dict) -> None:
    w, before = state[ROLLOUT], len(rows())
    t_del, took = stop_app(w)
    remove_pod(w)
    log(f"deleted pod {w.pod} after iteration {before}: its container stopped in {took:.1f} s (grace {w.grace_s} s)")
    t_play = time.time()
    play(state["files"][ROLLOUT])

    def registered():
        return [(t, line) for t, line in pod_log(state["learner"].container)
                if t >= t_play and "registered" in line and f"@{w.pod}:" in line]

    t_reg, reg = wait_for(f"the learner to register the new {w.pod}", registered, timeout=180)[0]
    log(f"learner says: {reg}")
    # It is in an iteration once it has sent a round: its own counter, then a row finished after.
    rounds = "royalefleet_rollout_rounds_total"
    wait_for(f"the new {w.pod} to send a round ({rounds} > 0)", lambda: (metric(w, rounds) or 0) > 0, timeout=240)
    t_round = time.time()

    def counted():
        ends = [(t, n) for t, n in it.progress(pod_log(state["learner"].container)) if t >= t_round]
        return len(ends) >= 2 and ends

    ends = wait_for("two iterations finished after the new rollout's first round", counted, timeout=240)
    got = rows()
    problems = contiguous(got, state["run_id"])
    if problems:
        raise Failed("after the rollout's replacement: " + "; ".join(problems))
    lost = [r for r in got if r["run/iteration"] > before and r["health/rollouts_lost"] > 0]
    # One rollout in the base: once the deleted one is counted lost, a row with a rollout and
    # no loss is the new one's.
    after = max([r["run/iteration"] for r in lost], default=before)
    joined = next((r["run/iteration"] for r in got if r["run/iteration"] > after
                   and r["health/rollouts"] >= 1 and r["health/rollouts_lost"] == 0), None)
    if joined is None:
        raise Failed(f"no row after iteration {after} has a rollout and no loss: {got[after:]}")
    t_joined = next(t for t, n in it.progress(pod_log(state["learner"].container)) if n == joined)
    log(f"{w.pod} replaced: played again {t_play - t_del:.1f} s after the deletion began, registered "
        f"{t_reg - t_play:.1f} s after the play; its /metrics counted a round {t_round - t_del:.0f} s after the "
        f"deletion; iteration {joined} is its first (finished {t_joined - t_del:.1f} s after the deletion); "
        f"iterations to {ends[-1][1]} finished since; rows 1..{len(got)} each once, run id "
        f"{state['run_id']}; " + (", ".join(f"iteration {r['run/iteration']} lost {r['health/rows_invalid']} rows "
                                            f"(rollouts_lost {r['health/rollouts_lost']})" for r in lost)
                                  or "no row counts a lost rollout"))
    state["figures"]["rollout"] = {"stop_s": round(took, 1), "replay_after_s": round(t_play - t_del, 1),
                                   "registered_after_play_s": round(t_reg - t_play, 1), "deleted_after": before,
                                   "joined_iteration": joined, "joined_row_after_s": round(t_joined - t_del, 1),
                                   "lost": {r["run/iteration"]: r["health/rows_invalid"] for r in lost}}


def phase_learner(state: dict) -> None:
    w = state[LEARNER]
    ip_before = pod_ip(w)
    # A last row of 1, 2 or 3 modulo the cadence: neither it nor the next (should it land before
    # the signal) is saved when written, so the stop has a row to save.
    wait_for(f"a last row of 1, 2 or 3 modulo {CHECKPOINT_EVERY} (not yet checkpointed)",
             lambda: rows() and rows()[-1]["run/iteration"] % CHECKPOINT_EVERY in (1, 2, 3), timeout=120, every=0.5)
    t_sig, took = stop_app(w)
    exit_code, finished = podman("inspect", "--format", "{{.State.ExitCode}} {{.State.FinishedAt.Unix}}",
                                 w.container, quiet=True).stdout.split()
    lines = pod_log(w.container)
    last = rows()[-1]["run/iteration"]
    saved = [(t, line) for t, line in lines if t >= t_sig and f"checkpoint of iteration {last} written" in line]
    if exit_code != "0":
        raise Failed(f"the learner exited {exit_code} on SIGTERM, not 0:\n" + "\n".join(x for _, x in lines[-15:]))
    if not saved:
        raise Failed(f"no `checkpoint of iteration {last} written` after the SIGTERM:\n"
                     + "\n".join(x for t, x in lines if t >= t_sig - 1))
    t_ck = saved[0][0] - t_sig
    on_disk = os.path.join(volume_path("checkpoints-checkpoint-0"), RUN_DIR, "checkpoints", f"{last:08d}")
    if not os.path.isdir(on_disk):
        raise Failed(f"the learner says iteration {last}'s checkpoint is written, but {on_disk} is not there")
    if took >= w.grace_s:
        raise Failed(f"the learner's pod took {took:.1f} s to stop: its grace is {w.grace_s} s (it was killed)")
    log(f"SIGTERM after iteration {last}: {saved[0][1]!r} {t_ck:.2f} s later; the pod stopped in {took:.1f} s "
        f"(exit 0; grace {w.grace_s} s); checkpoints-checkpoint-0 holds {RUN_DIR}/checkpoints/{last:08d}")
    remove_pod(w)
    t_play = time.time()
    play(state["files"][LEARNER])

    def resumed():
        lines = pod_log(w.container)
        ids = run_ids(lines)
        res = [line for _, line in lines if "resumed iteration" in line]
        return len(ids) > 0 and res and (ids[-1], res[-1])

    run_id, res = wait_for("`resumed iteration N` from the played-again learner", resumed, timeout=300)
    log(f"learner says: {res}")
    m = re.search(r"resumed iteration (\d+)", res)
    if run_id != state["run_id"] or int(m.group(1)) != last:
        raise Failed(f"the new learner pod resumed iteration {m.group(1)} of run {run_id}; expected {last} of {state['run_id']}")
    row = wait_for(f"iteration {last + 1}'s row", lambda: [r for r in rows() if r["run/iteration"] == last + 1],
                   timeout=300)[0]
    t_row = time.time()
    problems = contiguous(rows(), state["run_id"])
    if problems:
        raise Failed("after the learner's replacement: " + "; ".join(problems))
    log(f"the new learner pod (address {pod_ip(w)}; the deleted one's was {ip_before}: the rollout and the "
        f"evaluator dial `learner` by name) resumed iteration {last} of run {run_id} and wrote iteration {last + 1} "
        f"({row['health/rollouts']} rollout(s)) {t_row - t_play:.1f} s after it was played")
    state["figures"]["learner"] = {"sigterm_to_checkpoint_s": round(t_ck, 2), "stop_s": round(took, 1),
                                   "iteration": last, "next_row_after_play_s": round(t_row - t_play, 1)}


PAUSE_IMAGE = "localhost/podman-pause"
"""The infra (pause) image podman builds for itself at the first pod (catatonit)."""


def pause_images() -> set[str]:
    out = podman("images", "--format", "{{.Repository}}:{{.Tag}}", quiet=True).stdout.split()
    return {i for i in out if i.startswith(PAUSE_IMAGE + ":")}


def phase_build(state: dict) -> None:
    state["images_before"] = set(it.images_now())
    state["pause_before"] = pause_images()
    context = os.environ.get("IT_BUILD_CONTEXT") or it.ROOT
    for target in ("rollout", "learner"):
        t0 = time.monotonic()
        it.run(["podman", "build", "--target", target, "--build-arg", f"BASE_IMAGE={it.BASE_IMAGE}",
                "-t", f"localhost/royalefleet-{target}:latest", context], capture=False, timeout=3600)
        log(f"built localhost/royalefleet-{target}:latest in {time.monotonic() - t0:.0f} s")


def phase_manifests(state: dict, work: str) -> None:
    workloads, dropped = km.translate(km.load())
    for line in dropped:
        log(f"not played: {line}")
    base_file = with_checkpoint_every(workloads, CHECKPOINT_EVERY)
    log(f"every pod's ROYALEFLEET_CONFIG: {IT_CONFIG} = {base_file} with checkpoint.every_iterations "
        f"{CHECKPOINT_EVERY} (added to the ConfigMap)")
    state["ours"] = preflight(workloads)
    state["workloads"] = workloads
    state.update({w.name: w for w in workloads})
    folder = os.path.join(work, "kube")
    os.makedirs(folder)
    state["files"] = {"base": os.path.join(folder, "base.yaml")}
    with open(state["files"]["base"], "w") as fh:
        fh.write(km.to_yaml(km.one_file(workloads)))
    for w in workloads:
        state["files"][w.name] = os.path.join(folder, f"{w.name}.yaml")
        with open(state["files"][w.name], "w") as fh:
            fh.write(km.to_yaml(w.replay_docs()))
    kinds = [d["kind"] for d in km.one_file(workloads)]
    log(f"{state['files']['base']}: {len(kinds)} documents ("
        + ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds)) + ")")
    state["made"] = True
    make_secrets(workloads, work)


def teardown(state: dict, work: str) -> list[str]:
    """Remove everything the test made; returns what could not be removed."""
    left = []
    ours = state.get("ours")
    if ours and state.get("made"):
        for kind in ("pod", "volume", "secret", "network"):
            for _ in range(3):  # a container restarting (restartPolicy Always) can fail one `pod rm -f`
                there = [n for n in ours[kind] if exists(kind, n)]
                if not there:
                    break
                got = podman(kind, "rm", *(["-f", "-t", "0"] if kind == "pod" else []), *there, check=False, timeout=300)
                if got.returncode != 0:
                    log(f"podman {kind} rm exited {got.returncode}: {got.stderr.strip()[-400:]}")
                    time.sleep(2)
        left += [f"{kind} {n}" for kind, names in ours.items() for n in names if exists(kind, n)]
    if not it.KEEP_IMAGES and state.get("images_before") is not None:
        layers = it.images_now()
        base_id = podman("image", "inspect", "--format", "{{.Id}}", it.BASE_IMAGE, check=False, quiet=True).stdout.strip()
        base_layer = layers.get(base_id.removeprefix("sha256:"))
        new = [i for i, first in layers.items() if i not in state["images_before"]
               and (base_layer is None or first == base_layer)]
        left += [f"image {i[:12]}" for i in it.remove_images(new)]
        for name in sorted(pause_images() - state["pause_before"]):
            if podman("rmi", name, check=False, quiet=True).returncode != 0:
                left.append(f"image {name}")
        for target in ("rollout", "learner"):
            name = f"localhost/royalefleet-{target}:latest"
            if podman("image", "exists", name, check=False, quiet=True).returncode == 0:
                podman("rmi", name, check=False, quiet=True)
            if podman("image", "exists", name, check=False, quiet=True).returncode == 0:
                left.append(f"image {name}")
    if state.get("base_made") and not it.KEEP_IMAGES:
        if podman("rmi", it.BASE_IMAGE, check=False).returncode != 0:
            left.append(f"image {it.BASE_IMAGE}")
    shutil.rmtree(work, ignore_errors=True)
    return left


def diagnostics(state: dict) -> None:
    log("diagnostics: the pods and their last lines")
    try:
        print(podman("pod", "ps", check=False, quiet=True).stdout, flush=True)
        for w in state.get("workloads", []):
            got = it.run(["podman", "logs", "--tail", "40", w.container], check=False, quiet=True)
            print(f"----- {w.container} (last 40 lines)\n{got.stdout}{got.stderr}", flush=True)
    except Exception as exc:  # diagnostics must never hide the failure
        print(f"(diagnostics failed: {exc})", flush=True)


def main() -> int:
    if os.geteuid() != 0:
        print("kube play integration test: run as root (apt, debootstrap, rootful podman)", file=sys.stderr)
        return 2

    def interrupted(signum, _frame):
        raise Interrupted(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    work = tempfile.mkdtemp(prefix="royalefleet-kube-it.")
    os.chdir(it.ROOT)
    state: dict = {"figures": {}, "base_made": False}
    failure = None
    try:
        with phase("setup", "podman (deploy/podman/setup.sh, idempotent)"):
            it.script("setup.sh", work, capture=False, timeout=900)
            os.environ["CONTAINERS_CONF"] = os.path.join(work, "containers.conf")
            log(podman("--version", quiet=True).stdout.strip())
        with phase("base", f"BASE_IMAGE {it.BASE_IMAGE}"):
            if podman("image", "exists", it.BASE_IMAGE, check=False, quiet=True).returncode == 0:
                log(f"{it.BASE_IMAGE} is already here: used as it is, and kept")
            else:
                it.script("make-base-image.sh", it.BASE_IMAGE, capture=False, timeout=1200)
                state["base_made"] = True
        with phase("build", "podman build --target rollout, --target learner"):
            phase_build(state)
        with phase("manifests", "deploy/k8s/base for podman 4.3; the keys as podman secrets"):
            phase_manifests(state, work)
        with phase("up", f"podman kube play --network {NETWORK} base.yaml"):
            podman("network", "create", NETWORK, quiet=True)
            state["t_play"] = time.time()
            play(state["files"]["base"], timeout=600)
            log("pods: " + " ".join(podman("pod", "ps", "--format", "{{.Name}}:{{.Status}}", quiet=True).stdout.split()))
        with phase("train", "the learner's rows of iterations 1 and 2"):
            phase_train(state)
        with phase("rollout", "the rollout pod deleted and played again; no iteration lost"):
            phase_rollout(state)
        with phase("learner", "the learner pod deleted: SIGTERM, checkpoint, resume"):
            phase_learner(state)
    except Interrupted as exc:
        failure = f"interrupted ({exc})"
    except Failed as exc:
        failure = str(exc)
    except Exception as exc:  # a bug in the test itself: still clean up
        failure = f"{type(exc).__name__}: {exc}"
    if failure:
        log(f"FAILED: {failure}")
        if state.get("made"):
            diagnostics(state)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with phase("down", "every pod, volume, secret, the network; the images unless KEEP_IMAGES"):
        left = teardown(state, work)
        log("left behind: " + "; ".join(left) if left else
            "nothing left behind: no pod, volume, podman secret or network of the test, "
            + ("no image it built, " if not it.KEEP_IMAGES else "images kept (KEEP_IMAGES), ") + "no scratch folder")
    total = time.monotonic() - it.T0
    print("\nkube play integration test: phase times", flush=True)
    for name, dt in it.PHASES:
        print(f"  {name:<22} {dt:7.1f} s", flush=True)
    print(f"  {'total':<22} {total:7.1f} s", flush=True)
    if state["figures"]:
        print("kube play integration test: figures " + json.dumps(state["figures"], sort_keys=True), flush=True)
    if failure or left:
        print(f"kube play integration test: FAILED: {failure or 'left things behind'}", flush=True)
        return 1
    print("kube play integration test: passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
