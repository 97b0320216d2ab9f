"""A bot that searches at its choice decisions, in your own code: ``royalefleet export
latest+search:8 my-bot`` then ``royalefleet.load_bot("my-bot")``.

    bot = royalefleet.load_bot("my-bot")          # bot.json: "search": {"candidates": 8, "depth": 30}
    result = evaluate(bot, DefendOpponent(), bot.make_env, games=20)

The search (``services/evaluator/searched.py``, docs/search.md) tries each candidate play in a
copy of the battle, so the bot must see the battle it plays: the env it searches in is the one
``bot.make_env()`` built (the run's evaluation env), or one of yours handed to
``bot.watch(env)`` (built with the same env config: the copies are built from the run's). On
each decision it finds its seat by the observation it is given (the one that env's ``reset`` or
``step`` returned for that seat), draws one uint64 from ``rng`` and searches as
``royalefleet eval <player>+search:N`` does. In the copies the other seat is played by RoyaleGym's
``random`` unless ``bot.assume_opponent(opponent)`` names a model of it (any RoyaleGym opponent,
``act(obs, mask, rng)``, that keeps no state between decisions, such as ``DefendOpponent()``).

A searched bot given an observation of a battle it has not seen raises ``BattleUnseen`` (a
ValueError) saying what it needs, never plays blind. It wraps the snapshot's ``Bot``
(royalefleet/bot.py) and answers for it everywhere else (``config``, ``manifest``, ...).
"""

from __future__ import annotations

import numpy as np



class BattleUnseen(ValueError):
    """A searched bot asked to act on an observation of a battle it does not watch."""


class OpponentModel:
    """A RoyaleGym opponent (``act(obs, mask, rng)``) as the search's model of the other seat
    (``act(obs, rng)``, stateless: replayed in every copy of the battle)."""

    stateless = True
    scripted_seat = False  # full observations in the copies: the model may read more than the mask

    def __init__(self, opponent):
        self.opponent = opponent
        self.id = f"model:{type(opponent).__name__}"

    def act(self, obs: dict, rng: np.random.Generator) -> int:
        return int(self.opponent.act(obs, obs["action_mask"], rng))


class SearchedBot:
    """``bot`` (a ``royalefleet.bot.Bot``) searching with ``spec``
    (``shared.search.spec.SearchSpec``) at its choice decisions; every attribute it does not
    define is ``bot``'s. ``id`` carries the suffix (``snap:<id>+search:8``); ``manifest.search``
    the budget (``{"candidates": N, "depth": D}``, written to ``bot.json`` by ``export_bot``);
    ``stats`` what the search has spent (``shared.search.lookahead.SearchStats``)."""

    def __init__(self, bot, spec):
        from services.evaluator.searched import SearchedPlayer
        from shared.evaluation import eval_env_config

        self.bot, self.search = bot, spec
        self.searched = SearchedPlayer(bot.player.id + spec.suffix(), bot.player, spec,
                                       eval_env_config(bot.config.env))
        self.id = self.searched.id
        bot.manifest.search = {"candidates": spec.candidates, "depth": spec.depth}
        self._env = None
        self._last: dict = {}
        self._model: OpponentModel | None = None

    def __getattr__(self, name: str):
        if name == "bot":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.bot, name)

    @property
    def stats(self):
        return self.searched.stats

    def make_env(self):
        """The run's evaluation env (``Bot.make_env``), watched (``watch``): the battle this bot
        searches in."""
        return self.watch(self.bot.make_env())

    def watch(self, env):
        """Search in ``env`` from now on: its ``reset`` and ``step`` are wrapped to keep the
        observations they return, by which ``act`` finds its seat. Returns ``env``."""
        reset, step = env.reset, env.step

        def watched_reset(*args, **kwargs):
            obs, info = reset(*args, **kwargs)
            self._last = dict(obs)
            return obs, info

        def watched_step(actions):
            result = step(actions)
            self._last = dict(result[0])
            return result

        env.reset, env.step = watched_reset, watched_step
        self._env, self._last = env, {}
        return env

    def assume_opponent(self, opponent) -> "SearchedBot":
        """Model the other seat in the search's copies with ``opponent`` (a stateless RoyaleGym
        opponent, ``act(obs, mask, rng)``) instead of RoyaleGym's ``random``. Returns self."""
        self._model = OpponentModel(opponent)
        return self

    def act(self, obs: dict, mask, rng) -> int:
        """The searched action for one seat's observation of the watched battle; draws one
        uint64 from ``rng`` at a choice decision (the base's one uniform at a forced one).
        Raises BattleUnseen for an observation that the watched env did not return."""
        seat = next((a for a, seen in self._last.items() if seen is obs), None)
        if self._env is None or seat is None:
            raise BattleUnseen(f"bot {self.id}: a searching bot searches in the battle it plays and has not seen this "
                             "one: build its battles with bot.make_env() (royalegym.evaluate(bot, opponent, "
                             "bot.make_env)) or call bot.watch(env) on your env before env.reset")
        return int(self.searched.bind(self._env, seat, self._model).act(obs, rng))

    def __repr__(self) -> str:
        return (f"Bot({self.id}, run {self.manifest.run_name!r}, iteration {self.manifest.iteration}, searching "
                f"{self.search.candidates} candidates {self.search.depth} decisions deep)")


def with_search(bot, spec):
    """``bot`` searching with ``spec``, or ``bot`` itself when ``spec`` is None."""
    return bot if spec is None else SearchedBot(bot, spec)
