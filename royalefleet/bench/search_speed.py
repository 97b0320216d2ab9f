"""The search's speed against the engine's own: ``royalefleet bench --search PLAYER``.

    royalefleet bench RUN --profile cpu --search 'scripted:defend+search:8' --search-battles 2

Plays ``--search-battles`` battles of the searched player against ``--search-opponent``
(unsearched) on the evaluation env (blue in even battles, red in odd ones; the battle seeds of
``royalefleet.bench.search_stability``) and searches every choice decision of its seat once.
Prints, from that one run (the machine is shared and noisy, so both figures come from the same
seconds):

* searched decisions/s (wall) and per core-second;
* simulated decisions per core-second: engine decisions stepped in the simulations over the
  process CPU time of the searches (``time.process_time``; a search runs on one core);
* the engine alone on the same decisions: the same count over the CPU time spent inside
  RoyaleGym's ``RustEngine.step`` during the simulations (RoyaleSim's own step, timed per call),
  what the search would reach if everything around the engine's step cost nothing;
* their ratio (issue 37's target: at least 0.8), and where the search's CPU time went: the
  engine's step, its snapshot loads (``load_state``, one a playout), its state decode
  (``state``), RoyaleGym's masks (``action_mask``), and the rest (bots, the search's own Python).

A figure, not a test: nothing here passes or fails (tests/royalefleet/test_bench_search.py checks
the arithmetic and the lines).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

TARGET = 0.8
"""Issue 37: the search's simulated decisions reach at least 0.8 of the engine alone's rate."""
TIMED = (("engine", "step"), ("engine", "load_state"), ("engine", "state"), ("action_parser", "action_mask"))
"""The calls timed inside the simulations: (the simulation env's part, its method): RoyaleSim's step,
snapshot load and state decode (``RustEngine``), and RoyaleGym's mask (``TileActionParser``)."""


@dataclass
class SearchSpeed:
    """What one run measured: ``decisions`` searched, ``wall`` and ``cpu`` seconds in search
    (wall clock, process CPU), ``sim_steps`` engine decisions simulated, ``engine`` CPU
    seconds inside each timed call (``TIMED``'s method names) during the simulations."""

    decisions: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    sim_steps: int = 0
    engine: dict = field(default_factory=lambda: {name: 0.0 for _, name in TIMED})

    @property
    def sim_per_core_second(self) -> float:
        """Simulated decisions per CPU second of search."""
        return self.sim_steps / max(self.cpu, 1e-9)

    @property
    def engine_per_core_second(self) -> float:
        """The same decisions per CPU second of the engine's own step alone."""
        return self.sim_steps / max(self.engine["step"], 1e-9)

    @property
    def ratio(self) -> float:
        """Search rate / engine-alone rate = the step's share of the search's CPU time."""
        return self.sim_per_core_second / max(self.engine_per_core_second, 1e-9)

    def shares(self) -> dict[str, float]:
        """Each timed call's share of the search's CPU time, and ``rest`` (1 - their sum)."""
        out = {k: v / max(self.cpu, 1e-9) for k, v in self.engine.items()}
        out["rest"] = 1.0 - sum(out.values())
        return out


class _Timed:
    """An engine method that adds the CPU seconds of each call to ``into[name]``."""

    def __init__(self, method, into: dict, name: str):
        self.method, self.into, self.name = method, into, name

    def __call__(self, *args, **kwargs):
        t0 = time.process_time()
        try:
            return self.method(*args, **kwargs)
        finally:
            self.into[self.name] += time.process_time() - t0


def time_engines(sims: list, into: dict) -> None:
    """Time ``TIMED`` on each simulation env (instance attributes over the methods)."""
    for sim in sims:
        for part, name in TIMED:
            obj = getattr(sim, part)
            if not isinstance(getattr(obj, name), _Timed):
                setattr(obj, name, _Timed(getattr(obj, name), into, name))


def measure(env, searched, opponent, *, battles: int, master_seed: int, first_battle: int = 0,
            max_decisions: int = 3600) -> SearchSpeed:
    """Play ``battles`` games of ``searched`` (a ``SearchedPlayer`` whose opponent model is
    scripted, so its simulations use one env) against ``opponent`` on ``env``, every choice
    decision of its seat searched once; returns the ``SearchSpeed``. The battles are
    ``royalefleet.bench.search_stability.play_searched``'s (the same seeds and seats)."""
    from royalefleet.bench.search_stability import play_searched

    out = SearchSpeed()
    time_engines(searched.lookahead.sim_envs(1), out.engine)  # built before the clock starts
    steps0 = searched.stats.sim_steps

    def timed(seat, mine, b: int, t: int) -> int:
        w0, c0 = time.perf_counter(), time.process_time()
        action = seat.act(mine, np.random.default_rng((master_seed, b, t, 0)))
        out.cpu += time.process_time() - c0
        out.wall += time.perf_counter() - w0
        out.decisions += 1
        return action

    play_searched(env, searched, opponent, timed, battles=battles, master_seed=master_seed,
                  first_battle=first_battle, max_decisions=max_decisions)
    out.sim_steps = searched.stats.sim_steps - steps0
    return out


def report(player: str, opponent: str, battles: int, s: SearchSpeed) -> list[str]:
    """The bench's lines for ``s``."""
    shares = s.shares()
    return [
        f"searched decisions: {player} against {opponent}, {battles} battle(s), {s.decisions} searched decisions, "
        f"{s.sim_steps:,} simulated decisions",
        f"{'searched decisions/s':<40}{s.decisions / max(s.wall, 1e-9):>12.2f}   "
        f"({s.decisions / max(s.cpu, 1e-9):.2f} per core-second)",
        f"{'simulated decisions per core-second':<40}{s.sim_per_core_second:>12,.0f}   "
        f"({s.cpu:.1f} CPU s of search, {s.wall:.1f} s wall)",
        f"{'engine alone, same decisions, per core-s':<40}{s.engine_per_core_second:>12,.0f}   "
        f"(RoyaleSim's step: {s.engine['step']:.1f} CPU s)",
        f"{'ratio search / engine alone':<40}{s.ratio:>12.2f}   (target >= {TARGET:.2f})",
        f"{'search CPU time':<40}{'':>12}   engine step {shares['step']:.0%}, snapshot loads "
        f"{shares['load_state']:.0%}, state decode {shares['state']:.0%}, masks {shares['action_mask']:.0%}, "
        f"the rest (bots, the search's Python) {shares['rest']:.0%}",
    ]


def run_search_bench(cfg, player: str, opponent: str, battles: int, first_battle: int = 0, say=print) -> int:
    """``royalefleet bench --search``: 0 after printing, 2 (said) when ``player`` does not search
    or ``opponent`` does."""
    from royalefleet.players import LocalPlayers
    from shared.envs import build_env
    from shared.evaluation import eval_env_config
    from shared.search.spec import split_search

    if split_search(player)[1] is None or split_search(opponent)[1] is not None:
        say(f"bench: --search {player!r} must search (<player>+search:N[:D][,options]) and --search-opponent "
            f"{opponent!r} must not")
        return 2
    players = LocalPlayers(cfg)
    searched, opp = players.get(player), players.get(opponent)
    env = build_env(eval_env_config(cfg.env))
    speed = measure(env, searched, opp, battles=battles, master_seed=cfg.master_seed, first_battle=first_battle)
    for line in report(player, opponent, battles, speed):
        say(line)
    return 0
