"""The default reward (shared/rewards.py): the terminal objective plus three potentials.

Measured on real RustEngine battles: the two seats' rewards are exact negatives at every step; each
shaping term's discounted episode sum telescopes exactly, in Fractions, to gamma^T Phi(s_T) -
Phi(s_0) with Phi(s_T) = 0 when the battle was decided and kept when a step limit cut it; the
discount reaches every leaf of a nested composition; bad weights are refused all at once; and the
elixir potential prices every card's tap as the card's own elixir (spells charged at the tap, a
Mirror losing exactly its own one elixir), on both seats, for every card of the catalogue.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from royalegym import (
    ClashParallelEnv, DefaultStateMutator, GameOverCondition, RandomLegalOpponent, RustEngine,
    SpatialObsBuilder, TileActionParser,
)
from royalegym.protocol import EntityKind, MatchSetup, ShuffleMode, card_is_spell
from royalegym.reward import CombinedReward, ElixirTradeReward, WinLossReward

from shared.config import ConfigError, EnvConfig, RewardWeights, load_config
from shared.envs import build_env, build_reward
from shared.rewards import (
    TERMINAL_REWARD_TERM, CommittedElixirPotential, PotentialCombinedReward, PotentialCrownReward,
    PotentialReward, PotentialTowerHPReward, TermMagnitudes, default_potential_reward, set_gamma,
    shaping_weight_problems,
)

GAMMA = 0.999
SHAPING = ("PotentialCrownReward", "PotentialTowerHPReward", "CommittedElixirPotential")
SEATS = ("blue", "red")


# ----------------------------------------------------------------------------- real battles


def play(seed: int, max_steps: int) -> dict:
    """One random-legal battle on both seats through ``build_env``, recording per step and seat
    every term's weighted float, the shaping terms' exact Fractions and the potentials."""
    env = build_env(EnvConfig(max_steps=max_steps), gamma=GAMMA)
    reward = env.reward_fn
    shaping = {type(t).__name__: t for t, _ in reward.terms if isinstance(t, PotentialReward)}
    weights = {name: w for name, (_, w) in zip(reward.names, reward.terms)}
    opponent = RandomLegalOpponent(0.7)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    first = env.battle_state
    steps = []
    while True:
        prev = env.battle_state
        actions = {a: opponent.act(obs[a], obs[a]["action_mask"], rng) for a in SEATS}
        obs, rew, term, trunc, info = env.step(actions)
        state = env.battle_state
        steps.append({
            "reward": (rew["blue"], rew["red"]),
            "terms": (dict(reward.terms_for(0)), dict(reward.terms_for(1))),
            "exact": {
                n: (t.exact_reward(0, prev, state), t.exact_reward(1, prev, state)) for n, t in shaping.items()
            },
            "phi": {n: (t.potential(state, 0), t.potential(state, 1)) for n, t in shaping.items()},
        })
        if term["blue"] or trunc["blue"]:
            break
    return {
        "steps": steps, "game_over": env.battle_state.game_over, "truncated": trunc["blue"],
        "phi0": {n: (t.potential(first, 0), t.potential(first, 1)) for n, t in shaping.items()},
        "weights": weights, "info": info,
    }


@pytest.fixture(scope="module")
def battles() -> list[dict]:
    # Three battles to the end (or the 480-decision cap) and one cut at 150 decisions.
    return [play(seed, 480) for seed in (11, 12, 13)] + [play(14, 150)]


def test_the_battles_cover_a_decided_battle_and_a_truncated_one(battles):
    assert any(b["game_over"] for b in battles)
    assert any(b["truncated"] and not b["game_over"] for b in battles)
    assert sum(len(b["steps"]) for b in battles) > 600


def test_the_two_seats_rewards_are_exact_negatives_at_every_step(battles):
    for b in battles:
        for s in b["steps"]:
            blue, red = s["reward"]
            assert blue == -red  # floats, exactly
            assert s["terms"][0].keys() == s["terms"][1].keys() == {TERMINAL_REWARD_TERM, *SHAPING}
            for name, v in s["terms"][0].items():
                assert v == -s["terms"][1][name], name
            for name, (fb, fr) in s["exact"].items():
                assert fb == -fr, name  # Fractions, exactly
                assert float(fb) == -float(fr)
            for name, (pb, pr) in s["phi"].items():
                assert pb == -pr, name


def test_the_breakdown_is_the_weighted_exact_value_and_sums_to_the_reward(battles):
    for b in battles:
        for s in b["steps"]:
            for seat in (0, 1):
                terms = s["terms"][seat]
                for name in SHAPING:
                    assert terms[name] == b["weights"][name] * float(s["exact"][name][seat])
                total = 0.0
                for name in (TERMINAL_REWARD_TERM, *SHAPING):
                    total += terms[name]
                assert total == s["reward"][seat]


def test_each_shaping_term_telescopes_exactly(battles):
    g = Fraction(GAMMA)
    checked_zero = False
    for b in battles:
        steps = b["steps"]
        horizon = len(steps)
        powers = [Fraction(1)]
        for _ in steps:
            powers.append(powers[-1] * g)
        for name in SHAPING:
            for seat in (0, 1):
                total = sum((p * s["exact"][name][seat] for p, s in zip(powers, steps)), Fraction(0))
                final = steps[-1]["phi"][name][seat]
                phi_end = Fraction(0) if b["game_over"] else final
                assert total == powers[horizon] * phi_end - b["phi0"][name][seat], (name, seat)
                if b["game_over"] and final != 0:
                    checked_zero = True  # the zero was taken, not read off the final state
        if b["game_over"]:
            # The decided battle's last step paid -Phi(s_{T-1}), nothing for the final position.
            last, before = steps[-1], steps[-2]
            for name in SHAPING:
                assert last["exact"][name][0] == -before["phi"][name][0]
    assert checked_zero, "no decided battle ended at a non-zero potential; the zero went untested"


def test_a_truncation_keeps_the_positions_potential(battles):
    cut = [b for b in battles if b["truncated"] and not b["game_over"]]
    g = Fraction(GAMMA)
    for b in cut:
        last, before = b["steps"][-1], b["steps"][-2]
        for name in SHAPING:
            assert last["exact"][name][0] == g * last["phi"][name][0] - before["phi"][name][0]
    assert any(b["steps"][-1]["phi"]["CommittedElixirPotential"][0] != 0 for b in cut)


def test_the_episode_sums_in_the_terminal_info_match_the_steps(battles):
    for b in battles:
        info = b["info"]["blue"]
        for name in (TERMINAL_REWARD_TERM, *SHAPING):
            total = 0.0
            for s in b["steps"]:
                total += s["terms"][0][name]
            assert info[f"reward_sum/{name}"] == total


def test_term_magnitudes_sum_each_seats_absolute_step_values(battles):
    # TermMagnitudes reads terms_for; feed it the recorded breakdowns through a stand-in.
    class Recorded:
        def __init__(self):
            self.now = ({}, {})

        def terms_for(self, team):
            return self.now[team]

    b = battles[0]
    rec, mags = Recorded(), TermMagnitudes()
    for s in b["steps"]:
        rec.now = s["terms"]
        mags.add(rec)
    blue = mags.finish(0)
    for name in (TERMINAL_REWARD_TERM, *SHAPING):
        want = 0.0
        for s in b["steps"]:
            want += abs(s["terms"][0][name])
        assert blue[name] == want
    assert blue[TERMINAL_REWARD_TERM] == (1.0 if b["game_over"] and b["info"]["blue"]["outcome"] else 0.0)
    assert mags.finish(0) == {}  # finishing starts the seat afresh
    assert mags.finish(1).keys() == blue.keys()


# ----------------------------------------------------------------------------- the discount


def leaves(reward):
    if isinstance(reward, CombinedReward):
        for t, _ in reward.terms:
            yield from leaves(t)
    else:
        yield reward


def test_set_gamma_reaches_every_leaf_of_a_nested_composition():
    inner = CombinedReward([(PotentialTowerHPReward(), 0.5), (WinLossReward(), 1.0)])
    nested = CombinedReward([
        (default_potential_reward(), 1.0),
        (CombinedReward([(inner, 2.0), (CommittedElixirPotential(scale=5.0), 1.0)]), 1.0),
        (PotentialCrownReward(), 0.3),
    ])
    potentials = [t for t in leaves(nested) if isinstance(t, PotentialReward)]
    assert len(potentials) == 6
    assert all(t.gamma == 1.0 for t in potentials)
    assert set_gamma(nested, 0.997) == 6
    for t in potentials:
        assert t.gamma == 0.997 and t._gamma == Fraction(0.997)
    # The composition's own method forwards too.
    top = nested.terms[0][0]
    assert isinstance(top, PotentialCombinedReward)
    assert top.set_gamma(0.5) == 3
    assert [t.gamma for t in leaves(top) if isinstance(t, PotentialReward)] == [0.5] * 3
    # A refused discount leaves every leaf as it was.
    for bad in (float("nan"), float("inf"), True, "0.99", 1.5, -0.1, None):
        with pytest.raises((TypeError, ValueError)):
            set_gamma(nested, bad)
    assert sorted(t.gamma for t in potentials) == [0.5] * 3 + [0.997] * 3


def test_build_env_hands_the_discount_to_every_shaping_term():
    env = build_env(EnvConfig(), gamma=0.9985)
    assert [t.gamma for t in leaves(env.reward_fn) if isinstance(t, PotentialReward)] == [0.9985] * 3


# ----------------------------------------------------------------------------- weights


def test_bad_weights_are_refused_at_once_each_named():
    problems = shaping_weight_problems(
        {"crown": -0.1, "tower_hp": float("nan"), "elixir": True}
    )
    assert len(problems) == 3
    assert problems[0].startswith("crown=-0.1") and "negative" in problems[0]
    assert problems[1].startswith("tower_hp=nan") and "finite" in problems[1]
    assert problems[2].startswith("elixir=True") and "bool" in problems[2]
    problems = shaping_weight_problems(
        {"crown": "0.2", "tower_hp": float("inf"), "elixir": None, "king": 1.0}
    )
    assert [p.split("=")[0].split(":")[0] for p in problems] == ["crown", "tower_hp", "elixir", "king"]
    assert shaping_weight_problems({"crown": 0, "tower_hp": 1, "elixir": np.float32(0.5)}) == []
    with pytest.raises(ValueError) as info:
        default_potential_reward(crown="0.2", tower_hp=-1.0, elixir=float("-inf"))
    for name in ("crown", "tower_hp", "elixir"):
        assert f"{name}=" in str(info.value)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), float("-inf"), True, "0.2", None])
def test_load_config_refuses_a_bad_shaping_weight(bad):
    with pytest.raises(ConfigError) as info:
        load_config({"profile": "cpu", "env": {"reward_weights": {"elixir": bad}}})
    assert [p for p in info.value.problems if p.startswith("env.reward_weights.elixir:")]


def test_load_config_names_every_bad_weight_of_one_kind_at_once():
    with pytest.raises(ConfigError) as info:
        bad = {"crown": -1.0, "tower_hp": float("nan"), "elixir": True}
        load_config({"profile": "cpu", "env": {"reward_weights": bad}})
    assert sorted(p.split(":")[0] for p in info.value.problems) == [
        "env.reward_weights.crown", "env.reward_weights.elixir", "env.reward_weights.tower_hp"]


def test_a_weight_that_bypassed_load_config_is_refused_when_the_reward_is_built():
    # A struct built in Python is not validated by msgspec; the reward's own check still refuses.
    with pytest.raises(ValueError, match="tower_hp=nan"):
        build_reward(EnvConfig(reward_weights=RewardWeights(tower_hp=float("nan"))))


# ----------------------------------------------------------------------------- the composition


def test_the_potential_reward_is_the_default_and_royalegym_default_still_builds():
    assert EnvConfig().reward == "potential"
    built = build_reward(EnvConfig(reward_weights=RewardWeights(crown=0.3, tower_hp=0.0, elixir=0.07)))
    assert isinstance(built, PotentialCombinedReward)
    assert [(type(t).__name__, w) for t, w in built.terms] == [
        ("WinLossReward", 1.0), ("PotentialCrownReward", 0.3), ("PotentialTowerHPReward", 0.0),
        ("CommittedElixirPotential", 0.07)]
    assert built.terminal_class == "WinLossReward" and built.names[0] == TERMINAL_REWARD_TERM
    assert built.shaping_names == list(SHAPING)
    legacy = build_reward(EnvConfig(reward="royalegym_default"))
    assert type(legacy) is CombinedReward
    assert any(isinstance(t, ElixirTradeReward) for t, _ in legacy.terms)


def test_the_composition_rebuilds_from_its_config():
    reward = default_potential_reward(crown=0.25, elixir=0.0)
    again = PotentialCombinedReward.from_config(reward.config())
    assert again.config() == reward.config()
    assert again.terminal == 0 and [w for _, w in again.terms] == [1.0, 0.25, 0.1, 0.0]
    assert "gamma" not in str(reward.config())


def test_two_terms_filed_under_one_name_are_refused():
    with pytest.raises(ValueError, match="PotentialCrownReward"):
        PotentialCombinedReward(
            [(WinLossReward(), 1.0), (PotentialCrownReward(), 0.1), (PotentialCrownReward(), 0.2)]
        )
    with pytest.raises(ValueError, match="terminal"):
        PotentialCombinedReward([(WinLossReward(), 1.0)], terminal=1)


# ----------------------------------------------------------------------------- pricing


class Taps:
    """A battle from a controlled state: both decks fixed, dealt in order, both bars at
    ``elixir`` milli, past the deploy lockout. ``tap(team, card)`` plays the card on one seat
    while the other idles and returns what the tap did to the elixir potential."""

    FILL = ("Zap", "Log", "Arrows", "Snowball", "Heal", "Rage", "Fireball", "Poison", "Tornado")

    def __init__(self) -> None:
        self.engine = RustEngine()
        self.cards = list(self.engine.cards())
        self.by_name = {c.name: c for c in self.cards}
        self.by_id = {c.card_id: c for c in self.cards}
        self.env = ClashParallelEnv(
            self.engine, obs_builder=SpatialObsBuilder(), action_parser=TileActionParser(),
            reward_fn=default_potential_reward(), termination_cond=GameOverCondition(),
            state_mutator=DefaultStateMutator(), decision_ms=500,
        )
        self.term = CommittedElixirPotential()  # gamma 1: F is exactly the change of Phi
        self.term.bind(self.engine)

    def reset(self, first: list[str], *, start_tick: int = 200, elixir: int = 9500) -> None:
        ids = [self.by_name[n].card_id for n in first]
        deck = ids + [self.by_name[n].card_id for n in self.FILL if self.by_name[n].card_id not in ids]
        setup = MatchSetup(decks=[deck[:8], deck[:8]], shuffle=ShuffleMode.NONE, start_tick=start_tick,
                           elixir_milli=[elixir, elixir])
        self.obs, _ = self.env.reset(seed=1, options={"setup": setup})
        # The engine deals some cards (Mirror, Elixir Collector) after the opening hand: cycle the
        # cheapest other card, on both seats at once, until the first named card is in hand.
        want = ids[0]
        for _ in range(4):
            p = self.env.battle_state.players[0]
            if want in p.hand:
                return
            slot = min((k for k in range(4) if p.hand[k] not in ids), key=lambda k: p.hand_costs[k])
            self.step({a: self.action(a, slot) for a in SEATS})
            for _ in range(8):
                self.step({})

    def action(self, agent: str, slot: int) -> int | None:
        cells = np.argwhere(self.obs[agent]["mask_planes"][slot])
        if not len(cells):
            return None
        y, x = cells[len(cells) // 2]
        h, w = self.obs[agent]["mask_planes"].shape[1:]
        return 1 + slot * h * w + int(y) * w + int(x)

    def step(self, actions: dict) -> None:
        self.obs, *_ = self.env.step({a: actions.get(a) or 0 for a in SEATS})

    def wait_for(self, milli: int, steps: int = 80) -> None:
        for _ in range(steps):
            if min(p.elixir_milli for p in self.env.battle_state.players) >= milli:
                return
            self.step({})

    def tap(self, team: int, name: str) -> dict:
        card = self.by_name[name]
        prev = self.env.battle_state
        hand = prev.players[team].hand
        if card.card_id not in hand:
            return {"landed": False, "why": f"not in hand {hand}"}
        slot = hand.index(card.card_id)
        act = self.action(SEATS[team], slot)
        if act is None:
            return {"landed": False, "why": "no legal cell"}
        self.step({SEATS[team]: act})
        state = self.env.battle_state
        result = [r for r in self.env.last_results if r.team == team]
        if not result or result[0].status != 0:
            return {"landed": False, "why": f"refused: {result}"}
        before = {e.uid for e in prev.entities}
        new = [e for e in state.entities if e.team == team and e.uid not in before
               and e.kind not in (EntityKind.KING_TOWER, EntityKind.PRINCESS_TOWER)]

        def held(s, t):
            return Fraction(s.players[t].elixir_milli, 1000)

        return {
            "landed": True,
            "cost": prev.players[team].hand_costs[slot],
            # The bar against the idle seat's, which regenerated the same.
            "bar": (held(state, team) - held(state, 1 - team)) - (held(prev, team) - held(prev, 1 - team)),
            "board": self.term.board(state, team) - self.term.board(prev, team),
            "new_value": sum((self.term.unit_value(e) for e in new), Fraction(0)),
            "new": new,
            "F": self.term.exact_reward(team, prev, state),
            "idle_board": self.term.board(state, 1 - team) - self.term.board(prev, 1 - team),
        }


@pytest.fixture(scope="module")
def taps() -> Taps:
    return Taps()


def test_the_engines_rows_agree_with_the_catalogue_at_the_catalogues_level(taps):
    for c in taps.cards:
        if c.count and c.hitpoints:
            assert taps.term.own_hitpoints(c.card_id, taps.engine.card_level) == c.hitpoints, c.name


def test_one_play_of_a_unit_card_puts_exactly_its_elixir_on_the_board(taps):
    """Every card of the catalogue, on both seats: a unit card moves its elixir from the bar to the
    board (F = 0); a spell is charged at the tap (bar down by its cost, nothing priced, F = -cost/10).
    Any card no tap landed for is named."""
    no_tap, wrong = [], []
    for c in taps.cards:
        if c.name == "Mirror":
            continue  # needs a card to copy: its own test below
        taps.reset([c.name])
        for team in (0, 1):
            got = taps.tap(team, c.name)
            if not got["landed"]:
                no_tap.append(f"{c.name} (seat {team}): {got['why']}")
                break
            on_board = Fraction(0) if card_is_spell(c) else Fraction(c.elixir)
            expect = {"cost": c.elixir, "bar": -Fraction(c.elixir), "board": on_board,
                      "new_value": on_board, "F": (on_board - c.elixir) / 10, "idle_board": 0}
            seen = {k: got[k] for k in expect}
            if seen != expect:
                wrong.append(f"{c.name} (seat {team}): {seen} != {expect}")
    assert not no_tap, "no tap landed for: " + "; ".join(no_tap)
    assert not wrong, "\n".join(wrong)


def test_worked_examples_knight_goblin_gang_fireball(taps):
    taps.reset(["Knight", "GoblinGang", "Fireball"])
    for team in (0, 1):
        knight = taps.tap(team, "Knight")
        assert (knight["board"], knight["bar"], knight["F"]) == (3, -3, 0)
        assert len(knight["new"]) == 1
    for team in (0, 1):
        gang = taps.tap(team, "GoblinGang")
        assert (gang["board"], gang["bar"], gang["F"]) == (3, -3, 0)
        # Six units, all filed under the Goblin Gang; only the three the row describes are priced.
        assert len(gang["new"]) == 6
        assert sorted(taps.term.unit_value(e) for e in gang["new"]) == [0, 0, 0, 1, 1, 1]
        assert sorted(e.max_hp for e in gang["new"]) == [133, 133, 133, 202, 202, 202]
    taps.wait_for(4000)
    for team in (0, 1):
        fireball = taps.tap(team, "Fireball")
        assert (fireball["board"], fireball["bar"], fireball["F"]) == (0, -4, Fraction(-4, 10))


def test_a_mirror_play_loses_exactly_its_own_one_elixir(taps):
    taps.reset(["Knight", "Mirror"])
    for team in (0, 1):
        assert taps.tap(team, "Knight")["F"] == 0
    for team in (0, 1):
        got = taps.tap(team, "Mirror")
        assert got["landed"], got
        assert got["cost"] == 4 and got["bar"] == -4 and got["board"] == 3
        assert got["F"] == Fraction(-1, 10)
        (copy,) = got["new"]
        knight = taps.by_name["Knight"]
        # The copy is a Knight one level up: the row's 1766 hp would not match it.
        assert copy.card_id == knight.card_id and copy.level == taps.engine.card_level + 1
        assert copy.max_hp == taps.engine.unit_hitpoints(knight.card_id, copy.level)[0][2] != knight.hitpoints
    # Without the engine's per-level rows the copy is not the row's unit and scores zero.
    blind = CommittedElixirPotential()
    blind.bind(type("RowsOnly", (), {"cards": lambda self: taps.cards})())
    assert blind.unit_value(copy) == 0


def test_a_mirror_of_every_card_puts_the_copied_cards_elixir_on_the_board(taps):
    """Every card copied by a Mirror, on both seats: the board gains the copied card's elixir (a
    copied spell puts nothing on it) and the bar pays that plus one."""
    mirror = taps.by_name["Mirror"]
    no_tap, wrong = [], []
    for c in taps.cards:
        if c.name == "Mirror":
            continue
        taps.reset([c.name, "Mirror"], start_tick=2400)  # double elixir: shorter waits
        landed = all(taps.tap(team, c.name)["landed"] for team in (0, 1))
        if not landed:
            no_tap.append(f"{c.name}: the copied card did not land")
            continue
        full = c.elixir + 1 >= 10  # a ten-elixir Mirror is tapped from a full bar
        taps.wait_for(10_000 if full else (c.elixir + 1) * 1000)
        for team in (0, 1):
            got = taps.tap(team, mirror.name)
            if not got["landed"]:
                no_tap.append(f"Mirror of {c.name} (seat {team}): {got['why']}")
                break
            on_board = Fraction(0) if card_is_spell(c) else Fraction(c.elixir)
            seen = (got["cost"], got["new_value"], got["bar"] if not full else None)
            want = (c.elixir + 1, on_board, -Fraction(c.elixir + 1) if not full else None)
            if seen != want:
                wrong.append(f"Mirror of {c.name} (seat {team}): {seen} != {want}")
    assert not no_tap, "no tap landed for: " + "; ".join(no_tap)
    assert not wrong, "\n".join(wrong)


def test_a_finished_battle_has_potential_zero_but_the_position_is_still_readable(taps):
    taps.reset(["Fireball"])
    assert taps.tap(0, "Fireball")["landed"]
    state = taps.env.battle_state
    # Blue is four elixir behind, nothing on either board: Phi(blue) = -4/10.
    assert taps.term.potential(state, 0) == Fraction(-4, 10) == -taps.term.potential(state, 1)
    over = type(state)(**{f: getattr(state, f) for f in state.__struct_fields__} | {"game_over": True})
    assert taps.term.potential(over, 0) == taps.term.potential(state, 0) != 0
    assert taps.term.exact_reward(0, state, over) == -taps.term.potential(state, 0)
    assert taps.term.exact_reward(0, over, over) == 0
