"""Who plays in a simulation besides the candidate: the searching seat's continuation
(``SearchSpec.cont``) and the simulated opponents drawn from a set (``SearchSpec.opponents``)."""

from __future__ import annotations

import numpy as np

from shared.search.spec import DEFAULT_CONT, SELF, SearchSpec


class ScriptedModel:
    """A scripted player ``scripted:<name>`` as a simulation's seat: ``act(obs, rng)`` (the
    opponent form ``Lookahead.simulate`` takes) and ``act3(obs, mask, rng)`` (the continuation
    form). Reads the mask alone, keeps no state between decisions."""

    scripted_seat = True
    stateless = True

    def __init__(self, name: str, random_legal_noop_prob: float):
        from shared.envs import make_scripted

        self.id = "scripted:" + name
        self.bot = make_scripted(self.id, random_legal_noop_prob)

    def act(self, obs: dict, rng: np.random.Generator) -> int:
        return 0 if self.bot is None else int(self.bot.act(obs, obs["action_mask"], rng))


class PlayerPlayout:
    """A player (``act(obs, rng)``) as the continuation (``act(obs, mask, rng)``)."""

    def __init__(self, player):
        self.player = player

    def act(self, obs: dict, mask: np.ndarray, rng: np.random.Generator) -> int:
        return int(self.player.act(obs, rng))


def continuation(spec: SearchSpec, base, random_legal_noop_prob: float) -> tuple[object | None, bool]:
    """(the continuation bot for ``Lookahead._playout``, True when it reads the whole observation)
    of ``spec.cont`` for a searching player whose base is ``base``: None for the default
    (RoyaleGym's ``random``, built by the lookahead), a scripted bot, or the base itself."""
    if spec.cont == DEFAULT_CONT:
        return None, False
    if spec.cont == SELF:
        return PlayerPlayout(base), not getattr(base, "scripted_seat", False)
    return PlayerPlayout(ScriptedModel(spec.cont, random_legal_noop_prob)), False


def opponent_set(spec: SearchSpec, battle_model, random_legal_noop_prob: float) -> list:
    """The simulated opponents of ``spec``: ``[battle_model]`` (the battle's own) when
    ``spec.opponents`` is empty, else one ``ScriptedModel`` per name, in order."""
    if not spec.opponents:
        return [battle_model]
    return [ScriptedModel(n, random_legal_noop_prob) for n in spec.opponents]
