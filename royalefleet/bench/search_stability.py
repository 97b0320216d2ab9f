"""Are the search's labels stable? The same searched decisions searched twice with two search
seeds, and the share where the top-1 choice agrees (issue 37's "stable labels": >= 0.70).

    python -m royalefleet.bench.search_stability RUN --player 'scripted:defend+search:8,p=4,sh=1' \\
        --opponent scripted:defend --battles 6

Battles are played on the evaluation env (``shared.evaluation.eval_env_config``) with the
searched player on one seat (blue in even battles, red in odd ones) against ``--opponent``
(unsearched). At each choice decision of the searched seat the decision is searched twice, with
seeds drawn from two generators ``(battle, decision, 0)`` and ``(battle, decision, 1)``; the
first search's choice is played, so the decisions are the ones a searched teacher reaches. A
scripted base's candidates beyond its own pick and the no-op are random legal plays drawn from
the search's seed, so two seeds try different candidates: agreement then needs the search to
leave the player's own pick only for a difference it finds again.

Prints the decisions searched, the agreement (with its Wilson 95 % interval), the share where the
search left the player's own pick, and the search's cost; with ``--engine`` also the engine alone
stepping the same battles (decisions/s, the env's whole step with both seats ``mask_only``, in
wall seconds) beside the search's simulated decisions per second of search. The issue 37 figure
(RoyaleSim's step alone on the same simulated decisions, in CPU seconds, and where the rest of
the search's time goes) is ``royalefleet bench --search`` (``royalefleet.bench.search_speed``).
A figure, not a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from royalefleet.run_options import add_run_argument, add_run_options, run_config

STABLE_TARGET = 0.70
"""Issue 37's bar: the top-1 choice agrees with itself across two search seeds on >= 70 %."""


@dataclass
class Stability:
    """What ``measure`` saw: per decision searched twice, whether the two top-1 choices
    agreed (``agreed``) and the first search's margin (``margins``,
    ``shared.search.halving.pick_margin``; NaN where it did not search); ``overruled`` where the
    first search left the player's own pick, ``seconds`` wall time, ``sim_steps`` simulated
    engine decisions."""

    agreed: list = field(default_factory=list)
    margins: list = field(default_factory=list)
    overruled: int = 0
    seconds: float = 0.0
    sim_steps: int = 0

    @property
    def decisions(self) -> int:
        return len(self.agreed)

    @property
    def agree(self) -> int:
        return sum(self.agreed)

    @property
    def agreement(self) -> float:
        return self.agree / max(self.decisions, 1)


def wilson(k: int, n: int) -> tuple[float, float]:
    """The Wilson 95 % interval of k agreements in n decisions (``shared.stats.wilson_interval``);
    (0, 1) for n 0, a figure with no decisions searched."""
    from shared.stats import wilson_interval

    return wilson_interval(k, n) if n else (0.0, 1.0)


def play_searched(env, searched, opponent, decide, *, battles: int, master_seed: int, first_battle: int = 0,
                  max_decisions: int = 3600) -> None:
    """Play battles ``first_battle`` .. ``first_battle + battles - 1`` of ``searched`` (a
    ``SearchedPlayer``) against ``opponent`` (any unsearched player) on ``env``: the searched
    player on blue in even battles, red in odd ones; battle b's env seed derives from
    ``master_seed`` and b (stream ``env/battle/{battle}/ordinal/0``, the rollout's). At each
    choice decision t of the searched seat (more than one legal action) ``decide(seat, obs, b,
    t)`` gives the action played (``seat`` the player bound to the battle); a forced decision
    plays the no-op. Shared by this bench and ``royalefleet.bench.search_speed``."""
    from shared.seeding import derive_int, stream_path

    seats = ("blue", "red")
    for b in range(first_battle, first_battle + battles):
        me = b % 2
        seat = searched.bind(env, seats[me], opponent)
        env_seed = derive_int(master_seed, stream_path("env/battle/{battle}/ordinal/{ordinal}", battle=b, ordinal=0))
        obs, _ = env.reset(seed=int(env_seed))
        opp_rng = np.random.default_rng((master_seed, b, 2))
        for t in range(max_decisions):
            mine = obs[seats[me]]
            action = decide(seat, mine, b, t) if int(np.count_nonzero(mine["action_mask"])) > 1 else 0
            theirs = int(opponent.act(obs[seats[1 - me]], opp_rng))
            obs, _, term, trunc, _ = env.step({seats[me]: int(action), seats[1 - me]: theirs})
            if term["blue"] or trunc["blue"]:
                break


def measure(env, searched, opponent, *, battles: int, master_seed: int, first_battle: int = 0,
            max_decisions: int = 3600) -> Stability:
    """Play ``battles`` games of ``searched`` (a ``SearchedPlayer``) against ``opponent`` (any
    unsearched player) on ``env`` (``play_searched``) and search each choice decision of the
    searched seat twice; returns the ``Stability``."""
    out = Stability()
    t0, steps0 = time.perf_counter(), searched.stats.sim_steps

    from shared.search.halving import pick_margin

    def twice(seat, mine, b: int, t: int) -> int:
        searched.last = None
        first = seat.act(mine, np.random.default_rng((master_seed, b, t, 0)))
        last = searched.last
        overruled = last is not None and last.index != 0
        second = seat.act(mine, np.random.default_rng((master_seed, b, t, 1)))
        out.overruled += int(overruled)
        out.agreed.append(first == second)
        out.margins.append(float("nan") if last is None else pick_margin(last.means, last.visits, searched.spec.keep))
        return first

    play_searched(env, searched, opponent, twice, battles=battles, master_seed=master_seed,
                  first_battle=first_battle, max_decisions=max_decisions)
    out.seconds = time.perf_counter() - t0
    out.sim_steps = searched.stats.sim_steps - steps0
    return out


def engine_alone(env, *, battles: int, master_seed: int, first_battle: int = 0, decisions: int = 600) -> float:
    """Decisions/s of the engine alone on the same battles (their env seeds): both seats
    ``mask_only`` (as a simulation's scripted seats are) playing RoyaleGym's ``random``, up to
    ``decisions`` a battle; what a simulated decision costs without the search around it."""
    from royalegym import RandomLegalOpponent

    from shared.seeding import derive_int, stream_path

    bot, rng, steps = RandomLegalOpponent(0.7), np.random.default_rng(master_seed), 0
    t0 = time.perf_counter()
    for b in range(first_battle, first_battle + battles):
        env_seed = derive_int(master_seed, stream_path("env/battle/{battle}/ordinal/{ordinal}", battle=b, ordinal=0))
        obs, _ = env.reset(seed=int(env_seed), options={"mask_only": ["blue", "red"]})
        for _ in range(decisions):
            obs, _, term, trunc, _ = env.step({s: int(bot.act(obs[s], obs[s]["action_mask"], rng)) for s in obs})
            steps += 1
            if term["blue"] or trunc["blue"]:
                break
    return steps / max(time.perf_counter() - t0, 1e-9)


def by_margin(s: Stability) -> str:
    """The agreement split by the first search's margin, in ``royalefleet.clone_margins``' bands:
    a line a band with decisions, "" without margins. A clone can copy the clear departures only
    if the search finds them again with another seed."""
    from royalefleet.clone_margins import band_words, margin_bands

    agreed = np.asarray(s.agreed, bool)
    lines = []
    for lo, hi, band in margin_bands(np.asarray(s.margins, np.float64)):
        if band.any():
            k, n = int(agreed[band].sum()), int(band.sum())
            w_lo, w_hi = wilson(k, n)
            lines.append(f"    margin {band_words(lo, hi):>9}: {n} decisions, top-1 agreement {k / n:.3f} "
                         f"[{w_lo:.3f}, {w_hi:.3f}]\n")
    if not lines:
        return ""
    return "".join(["  by the first search's margin (its best survivor's score minus the runner-up's):\n", *lines])


def report(player: str, opponent: str, battles: int, s: Stability, engine: float | None = None) -> str:
    """The figure's lines; with ``engine`` (``engine_alone``'s decisions/s) the search's simulated
    decisions per second of search beside it."""
    lo, hi = wilson(s.agree, s.decisions)
    tail = "" if engine is None else (
        f"  the engine alone on the same battles: {engine:,.0f} decisions/s; the search simulated "
        f"{s.sim_steps / max(s.seconds, 1e-9):,.0f} decisions per second of search "
        f"({s.sim_steps / max(s.seconds, 1e-9) / max(engine, 1e-9):.2f} of it)\n")
    return (f"search stability: {player} against {opponent}, {battles} battles\n"
            f"  {s.decisions} searched decisions, each searched with two seeds: top-1 agreement "
            f"{s.agreement:.3f} [{lo:.3f}, {hi:.3f}] (target >= {STABLE_TARGET:.2f})\n"
            f"  the first search left the player's own pick at {s.overruled / max(s.decisions, 1):.3f} of them\n"
            + by_margin(s) +
            f"  {s.seconds:.1f} s, {2 * s.decisions / max(s.seconds, 1e-9):.2f} searches/s, "
            f"{s.sim_steps / max(s.seconds, 1e-9):,.0f} simulated decisions/s\n" + tail)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m royalefleet.bench.search_stability", description=__doc__.split("\n")[0])
    add_run_argument(ap)
    ap.add_argument("--player", required=True, help="the searched player, <player>+search:N[:D][,options]")
    ap.add_argument("--opponent", default="scripted:defend", help="the unsearched opponent (default scripted:defend)")
    ap.add_argument("--battles", type=int, default=4, help="battles to play (default 4)")
    ap.add_argument("--first-battle", type=int, default=0, help="the first battle id (default 0)")
    ap.add_argument("--engine", action="store_true", help="also time the engine alone on the same battles")
    add_run_options(ap)
    args = ap.parse_args(argv)
    from royalefleet.players import LocalPlayers
    from shared.envs import build_env
    from shared.evaluation import eval_env_config
    from shared.search.spec import split_search

    cfg = run_config(args)
    if split_search(args.player)[1] is None or split_search(args.opponent)[1] is not None:
        print(f"search_stability: --player {args.player!r} must search and --opponent {args.opponent!r} must not",
              file=sys.stderr)
        return 2
    players = LocalPlayers(cfg)
    searched, opponent = players.get(args.player), players.get(args.opponent)
    env = build_env(eval_env_config(cfg.env))
    s = measure(env, searched, opponent, battles=args.battles, master_seed=cfg.master_seed,
                first_battle=args.first_battle)
    engine = engine_alone(env, battles=args.battles, master_seed=cfg.master_seed,
                          first_battle=args.first_battle) if args.engine else None
    sys.stdout.write(report(args.player, args.opponent, args.battles, s, engine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
