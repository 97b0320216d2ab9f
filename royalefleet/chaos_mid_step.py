"""``royalefleet chaos``'s kills aimed at the questions a searched step asks in its middle
(``LeafQuery``, ``SimActQuery``; services/rollout/mid_step.py, services/learner/alphazero/rounds.py).

The moment is caught, not guessed: the learner is frozen (SIGSTOP) while a rollout is at work
on a searched step (its ``royalefleet_rollout_mid_step_questions`` counter grows), and the
rollouts' ``royalefleet_rollout_mid_step_waiting`` gauges are read until one says 1. A frozen
learner answers nothing, so that rollout's question is outstanding for as long as the learner
stays frozen: a kill then lands during the question, certainly. A rollout that ends its step
without asking again (its Round sent) waits for the next Step; the learner is let go and the
catch is tried again, up to a deadline.

- ``rollout_mid_question``: the waiting rollout SIGKILLed, then the learner let go. The learner
  must close the iteration without it (the shard's round is given up after
  ``rollout.round_timeout_s`` from its last question), the launcher restarts it, it joins
  again, and the rows go on.
- ``learner_mid_question``: the frozen learner SIGKILLed with the question unanswered. The
  rollout must not wait forever: the restarted learner answers its heartbeats with a Rejoin,
  which ends the wait (counted ``royalefleet_rollout_mid_step_rejoins``), or, failing that, it
  gives up after ``rollout.round_timeout_s`` (``MidStepTimeout``, counted
  ``royalefleet_rollout_mid_step_timeouts``); it says Hello again and joins the learner resumed
  from its checkpoint; the rows go on.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from royalefleet.chaos import Chaos

CATCH_S = 240.0
"""How long a catch may take (a searched step takes seconds on a loaded 2-core machine)."""
FROZEN_S = 3.0
"""How long the frozen learner is watched for a rollout's question before it is let go."""


def rollout_metrics_port(pid: int) -> int | None:
    """The metrics port the launcher gave rollout ``pid`` (its ``ROYALEFLEET_METRICS_PORT``)."""
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"ROYALEFLEET_METRICS_PORT="):
            port = int(item.split(b"=", 1)[1] or 0)
            return port or None
    return None


def mid_step_state(pid: int) -> tuple[float, float, float] | None:
    """(questions asked, questions given up (timed out or ended by a Rejoin), waiting now) of
    rollout ``pid``'s /metrics, or None when it does not answer (starting, dead, or its metrics
    off)."""
    from prometheus_client.parser import text_string_to_metric_families

    port = rollout_metrics_port(pid)
    if port is None:
        return None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    values = {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples}
    try:
        return (values["royalefleet_rollout_mid_step_questions_total"],
                values["royalefleet_rollout_mid_step_timeouts_total"] + values["royalefleet_rollout_mid_step_rejoins_total"],
                values["royalefleet_rollout_mid_step_waiting"])
    except KeyError:
        return None


def questions_asked(chaos: Chaos) -> dict[int, float]:
    """rollout pid -> questions it has asked, for the rollouts that answer."""
    out = {}
    for pid in chaos.pids("rollout"):
        state = mid_step_state(pid)
        if state is not None:
            out[pid] = state[0]
    return out


def catch_mid_question(chaos: Chaos, timeout: float = CATCH_S) -> tuple[int, int, float]:
    """Freeze the learner at a moment a rollout's mid-step question is outstanding (module
    docstring). Returns (the frozen learner's pid, the waiting rollout's pid, its questions so
    far); the caller lets the learner go (SIGCONT) or kills it. Raises ``ChaosError`` (from
    ``Chaos.wait_for``) after ``timeout`` s without one: a run whose rollouts never ask (not a
    searched algorithm) or a stack that stopped answering."""
    deadline = time.monotonic() + timeout

    def freeze_once() -> tuple[int, int, float] | None:
        before = chaos.wait_for("a rollout's metrics", lambda: questions_asked(chaos))
        # a rollout at work on a searched step: its questions grow
        chaos.wait_for(f"a rollout asking mid-step questions ({chaos.algorithm})", lambda: any(
            n > before.get(pid, n) for pid, n in questions_asked(chaos).items()),
            timeout=max(1.0, deadline - time.monotonic()))
        learner = chaos.wait_for("a live learner", lambda: chaos.pids("learner"))[0]
        os.kill(learner, signal.SIGSTOP)
        chaos.figures.mid_question_tries += 1
        watch_until = time.monotonic() + FROZEN_S
        while time.monotonic() < watch_until:
            for pid in chaos.pids("rollout"):
                state = mid_step_state(pid)
                if state is not None and state[2] == 1:
                    return learner, pid, state[0]
            time.sleep(0.02)
        os.kill(learner, signal.SIGCONT)  # between steps: let it go and try again
        return None

    return chaos.wait_for("a mid-step question outstanding", freeze_once, timeout=timeout)


def _rows_go_on(chaos: Chaos, kind: str, t_kill: float, rows_before: int) -> None:
    """Two more rows after the kill; the recovery's seconds recorded under ``kind``."""
    chaos.wait_for(f"a row after the mid-question kill of the {kind}", lambda: chaos.last_iteration() > rows_before)
    chaos.figures.mid_question[kind].append(round(time.monotonic() - t_kill, 1))
    chaos.wait_rows(1)


def rollout_mid_question(chaos: Chaos) -> None:
    """A rollout SIGKILLed while its searched step waits for the learner's answer."""
    learner, rollout, asked = catch_mid_question(chaos)
    before = chaos.last_iteration()
    try:
        os.kill(rollout, signal.SIGKILL)
        chaos.figures.kills += 1
    finally:
        os.kill(learner, signal.SIGCONT)
    t_kill = time.monotonic()
    chaos.say(f"chaos: SIGKILL rollout (pid {rollout}) waiting on its mid-step question {asked:.0f}")
    _rows_go_on(chaos, "rollout", t_kill, before)
    if chaos.pids("learner") != [learner]:
        chaos.problems.append("rollout_mid_question: the learner was restarted after a rollout died mid-question")


def process_age_s(pid: int) -> float:
    """Seconds since process ``pid`` started (/proc: its start time in clock ticks after boot)."""
    start_ticks = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])
    uptime = float(open("/proc/uptime").read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def learner_mid_question(chaos: Chaos, settle_s: float | None = None) -> None:
    """The learner SIGKILLed (frozen first) with a rollout's mid-step question unanswered.

    Only once the learner has run ``settle_s`` (default the launcher's ``QUICK_EXIT_S``): its
    kill is then not a quick exit, so it never brings the launcher nearer to giving up on a
    crash-looping learner, whatever learner kills the schedule put before it."""
    from royalefleet.launcher import QUICK_EXIT_S

    settle = QUICK_EXIT_S + 1.0 if settle_s is None else settle_s
    chaos.wait_for(f"the learner to have run {settle:.0f} s", lambda: chaos.pids("learner") and process_age_s(
        chaos.pids("learner")[0]) >= settle, timeout=settle + 60.0)
    learner, rollout, asked = catch_mid_question(chaos)
    before = chaos.last_iteration()
    timeouts = (mid_step_state(rollout) or (0, 0, 0))[1]
    seen = len(chaos.lines())
    os.kill(learner, signal.SIGKILL)
    chaos.figures.kills += 1
    t_kill = time.monotonic()
    chaos.say(f"chaos: SIGKILL learner (pid {learner}) with rollout {rollout}'s mid-step question {asked:.0f} "
              "unanswered")
    _rows_go_on(chaos, "learner", t_kill, before)
    after = mid_step_state(rollout)
    unanswered = [line for line in chaos.lines()[seen:] if "did not answer SetState" in line]
    if unanswered:  # its battles restarted although the checkpoint held their states: a loss
        chaos.problems.append(f"learner_mid_question: {unanswered[0]}")
    if after is None:
        chaos.problems.append(f"learner_mid_question: rollout {rollout} died after the learner's kill (it must rejoin)")
    elif after[1] <= timeouts:
        chaos.problems.append(f"learner_mid_question: rollout {rollout} counted no mid-step question given up "
                              f"({timeouts:.0f} -> {after[1]:.0f}): its unanswered question ended neither in a "
                              "timeout nor a Rejoin")
