"""Redealing what the searching seat cannot see (the ``redeal=1`` search option).

A search copies the real battle (``ClashParallelEnv.snapshot``), so its simulated opponents play
the enemy's real hand and queue, which the searching seat's observation never shows: the search
would choose with knowledge a player does not have. With ``redeal`` every playout starts from the
battle with the enemy's UNSEEN cards redealt: each card of the enemy's hand and queue that the
searching seat has not seen played (the observation's ``enemy_cards_seen``) is replaced, in its
place, by a card drawn from the cards a random deal can hold, none of them seen; the seen cards
keep their places (the seat could track where they are in the cycle). Elixir, the board and
everything else stay.

RoyaleGym's saved battle (``Engine.save_state``) is JSON; its hand and queue hold the engine's own
card ids (not the catalogue's ``card_id``), which ``SaveIds`` reads once by dealing every card of
the catalogue in a scratch engine. A battle edited so no longer matches its stored state hash, and
RoyaleGym's load refuses it naming the hash it rebuilt: the redeal stores that hash and loads
again (``_rehash``), so a battle that still fails to load is refused loudly.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

DECK = 8
EMPTY = 0xFFFF
"""The save format's id of an empty hand slot (a card just played, its replacement not yet
drawn: the queue then holds the deck's other cards)."""
_REBUILT = re.compile(r"rebuilt 0x([0-9a-f]+)")
ENEMY_SEEN = "enemy_cards_seen"
"""The observation's vector field of the enemy cards the seat has seen played (catalogue ids):
what a ``redeal=1`` search keeps of the enemy's hand and queue."""


def seen_cards(obs: dict, obs_builder) -> np.ndarray:
    """(n_cards,) bool: the enemy cards ``obs`` (a seat's full observation, with ``vector``) says
    its seat has seen played, by ``obs_builder``'s ``vector_offsets()``. Raises ValueError naming
    the field when the builder has no ``enemy_cards_seen``."""
    offsets = obs_builder.vector_offsets()
    if ENEMY_SEEN not in offsets:
        raise ValueError(f"redeal needs the observation's {ENEMY_SEEN!r} vector field; "
                         f"{type(obs_builder).__name__} has none (use royalegym.SpatialObsBuilder)")
    return np.asarray(obs["vector"])[offsets[ENEMY_SEEN]] > 0


@dataclass(frozen=True)
class SaveIds:
    """The engine's save-format card ids against the catalogue's (``CardInfo.card_id``)."""

    to_save: dict[int, int]
    """catalogue id -> save-format id, for every card a deck can hold."""
    to_catalogue: dict[int, int]
    names: dict[int, str]
    """catalogue id -> the card's name (the saved ``decks`` use names)."""
    by_name: dict[str, int]
    """``names`` the other way round."""
    champions: frozenset[int]
    dealable: tuple[int, ...]
    """The catalogue ids a random deal draws from (RoyaleGym's ``random_deck``: no event card)."""

    @classmethod
    def read(cls, engine) -> "SaveIds":
        """Deal every card of ``engine``'s catalogue once, 8 to a seat's deck without shuffling
        (at most one champion a deck), and read where each lands in the saved hand and queue.
        Raises RuntimeError when a dealt deck does not come back as dealt."""
        from royalegym.protocol import MatchSetup
        from royalegym.state_mutator import EVENT_CARDS

        cards = list(engine.cards())
        champions = [c.card_id for c in cards if c.champion]
        others = [c.card_id for c in cards if not c.champion]
        decks, pool = [], list(others)
        for champ in champions:  # one champion a deck, filled with the others
            decks.append([champ] + pool[: DECK - 1])
            pool = pool[DECK - 1:]
        while pool:
            deck = pool[:DECK]
            pool = pool[DECK:]
            deck += others[: DECK - len(deck)]  # the last deck topped up with cards already read
            decks.append(deck)
        to_save: dict[int, int] = {}
        for k in range(0, len(decks), 2):
            pair = decks[k:k + 2] if k + 1 < len(decks) else [decks[k], decks[0]]
            engine.reset(0, MatchSetup(decks=[list(d) for d in pair], shuffle=0))
            saved = json.loads(engine.save_state())
            for team, deck in enumerate(pair):
                p = saved["players"][team]
                dealt = [int(x) for x in p["hand"] + p["queue"]]
                if len(dealt) != DECK:
                    raise RuntimeError(f"a dealt deck came back with {len(dealt)} cards, not {DECK}")
                for card, save_id in zip(deck, dealt):
                    if to_save.setdefault(card, save_id) != save_id:
                        raise RuntimeError(f"card {card} came back as save id {save_id}, before as {to_save[card]}")
        return cls(to_save=to_save, to_catalogue={v: k for k, v in to_save.items()},
                   names={c.card_id: c.name for c in cards}, by_name={c.name: c.card_id for c in cards},
                   champions=frozenset(champions),
                   dealable=tuple(sorted(c.card_id for c in cards if c.name not in EVENT_CARDS)))


def redeal(blob: bytes, enemy: int, seen: np.ndarray, rng: np.random.Generator, ids: SaveIds,
           scratch_engine) -> bytes:
    """``blob`` (a saved battle) with seat ``enemy``'s unseen cards redealt (module docstring):
    ``seen`` (n_cards,) bool over catalogue ids, the searching seat's ``enemy_cards_seen``. A
    champion is drawn only when the deck keeps no other (RoyaleGym's random deal holds at most
    one), and no event card. The blob is returned unchanged when every
    card is seen. The new blob is loaded into ``scratch_engine`` (any engine of the same build) to
    rebuild its state hash; RuntimeError when it cannot be loaded even so."""
    state = json.loads(blob)
    player = state["players"][enemy]
    raw = [int(x) for x in player["hand"] + player["queue"]]
    if any(x != EMPTY and x not in ids.to_catalogue for x in raw):
        raise RuntimeError(f"the saved battle holds card ids {raw}, not all of them dealt when the save ids were "
                           "read: another engine build?")
    held = [ids.to_catalogue[x] for x in raw if x != EMPTY]
    known = {int(i) for i in np.flatnonzero(seen)}
    unseen = [c for c in held if c not in known]
    if not unseen:
        return blob
    pool = np.array([c for c in ids.dealable if c not in known], np.int64)
    kept_champion = any(c in ids.champions for c in held if c in known)
    fresh: list[int] = []
    for c in rng.permutation(pool):
        c = int(c)
        if c in ids.champions and (kept_champion or any(x in ids.champions for x in fresh)):
            continue  # a deal holds at most one champion
        fresh.append(c)
        if len(fresh) == len(unseen):
            break
    swap = dict(zip(unseen, fresh))
    dealt = [x if x == EMPTY else ids.to_save[swap.get(ids.to_catalogue[x], ids.to_catalogue[x])] for x in raw]
    n_hand = len(player["hand"])
    player["hand"], player["queue"] = dealt[:n_hand], dealt[n_hand:]
    state["decks"][enemy] = [ids.names[swap.get(ids.by_name[n], ids.by_name[n])] for n in state["decks"][enemy]]
    return _rehash(state, scratch_engine)


def _rehash(state: dict, engine) -> bytes:
    """``state`` as a blob ``engine`` loads: its stored hash replaced by the one the load rebuilt."""
    blob = json.dumps(state).encode()
    try:
        engine.load_state(blob)
        return blob
    except ValueError as exc:
        found = _REBUILT.search(str(exc))
        if found is None:
            raise RuntimeError(f"the redealt battle does not load: {exc}") from None
        state["state_hash"] = int(found.group(1), 16)
    blob = json.dumps(state).encode()
    try:
        engine.load_state(blob)
    except ValueError as exc:
        raise RuntimeError(f"the redealt battle does not load with its rebuilt hash: {exc}") from None
    return blob
