"""A trained bot in your own code: ``royalefleet.load_bot`` and the folder ``royalefleet export``
writes.

    import numpy as np
    import royalefleet
    from royalegym import ClashParallelEnv, RustEngine, evaluate
    from royalegym.opponents import DefendOpponent

    bot = royalefleet.load_bot("exported/my-bot")          # or load_bot("latest", run="myrun")
    result = evaluate(bot, DefendOpponent(), lambda: bot.make_env(), games=20)

``load_bot`` returns a ``Bot``: a RoyaleGym opponent (``act(obs, mask, rng) -> int``, the
action in the seat's own frame), so it plugs into ``royalegym.evaluate``, an opponent pool or a
loop of your own. It plays exactly as the evaluators play that snapshot (the same observation
packing, the same float32 actor, one uniform drawn from ``rng`` at every decision), on the CPU
unless told otherwise. It needs no service and, once exported, no run folder: an export holds
the actor (``actor.safetensors``, float16), the snapshot's ``spec.json``, the run's
``config.json`` and ``bot.json`` (what it is, the engine build it was trained on and the
sha256 of the weights). Loading checks the engine build, the observation layout and the codec
table against this machine's RoyaleGym and refuses a mismatch by name.

Importing this module (``royalefleet.load_bot``) starts nothing and imports nothing heavy;
loading a bot imports torch and builds one battle to read the layout (a few seconds).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgspec

BOT_FILE, ACTOR_FILE, SPEC_FILE, CONFIG_FILE = "bot.json", "actor.safetensors", "spec.json", "config.json"
EXPORT_FORMAT = 1


class BotRefused(ValueError):
    """A bot that cannot play here; the text names the field, both values and what to do."""


class BotManifest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``bot.json`` of an exported bot."""

    format: int
    player: str
    """``snap:<id>``: the snapshot this bot is (its id is the sha256 prefix of the weights)."""
    run_name: str
    iteration: int
    env_steps: int
    actor_sha256: str
    engine: dict
    """The ``shared.messages.EngineBuild`` of the run's RoyaleGym, as a JSON object."""
    search: dict | None = None
    """The search budget of a bot exported as ``<player>+search:N[:D]``: ``{"candidates": N,
    "depth": D}`` (royalefleet/bot_search.py); None for a bot that plays its policy alone."""


class Bot:
    """A snapshot as a RoyaleGym opponent. ``id`` is ``snap:<id>``; ``config`` the run's
    ``RunConfig``; ``player`` the evaluator's ``SnapshotPlayer`` it plays through."""

    def __init__(self, player, config, manifest: BotManifest, actor_bytes: bytes, spec_bytes: bytes):
        self.player, self.config, self.manifest = player, config, manifest
        self.actor_bytes, self.spec_bytes = actor_bytes, spec_bytes
        self.id = player.id

    def act(self, obs: dict, mask, rng) -> int:
        """The action for one seat's observation (``mask`` is ``obs["action_mask"]``, accepted
        for RoyaleGym's opponent signature); draws one float32 uniform from ``rng``."""
        return int(self.player.act(obs, rng))

    def make_env(self):
        """A fresh RoyaleGym env built as the run's evaluation env (full matches, the run's
        deck, reward and parser), for ``royalegym.evaluate``'s ``env_fn``."""
        from shared.envs import build_env
        from shared.evaluation import eval_env_config

        return build_env(eval_env_config(self.config.env))

    def __repr__(self) -> str:
        return f"Bot({self.id}, run {self.manifest.run_name!r}, iteration {self.manifest.iteration})"


def load_bot(source: str | os.PathLike, *, run: str | None = None, runs_dir: str | os.PathLike = "runs",
             config=None, device: str = "cpu", trust_code: bool = False) -> Bot:
    """The bot of an exported folder (``source`` a path holding ``bot.json``) or of a run's
    snapshot (``source`` ``snap:<id>``, the bare id, ``latest`` or ``champion``, any of them with
    ``+search:N[:D]`` for a bot that searches (royalefleet/bot_search.py), with ``run``
    naming the run under ``runs_dir``; the run's ``config.json`` gives its config unless
    ``config``, a ``RunConfig``, is given). ``device``: where the actor runs ("cpu", "cuda").

    A folder's ``config.json`` never decides what is imported: one whose
    ``env.extra_component_modules`` names a module this machine does not allow
    (``shared.components.local_modules``) is refused before anything is imported, unless
    ``trust_code=True`` (you trust whoever made the folder: its modules are then allowed in
    this process).

    Raises BotRefused for a folder or run that cannot be read as a bot, that names code this
    machine does not allow (the message names the modules and how to allow them), an engine build, an
    observation layout or a codec table other than this machine's, or weights whose sha256 is
    not the manifest's; ValueError for a player id that names no snapshot.
    """
    path = Path(source)
    if (path / BOT_FILE).is_file():
        return _load_export(path, device, trust_code)
    if run is None and config is None:
        raise BotRefused(f"{str(source)!r} is no exported bot folder (no {BOT_FILE}); to load a run's snapshot "
                         "pass run='<name>' (and runs_dir), or export it first: royalefleet export snap:<id> OUT")
    cfg = config if config is not None else _run_config(Path(runs_dir), run, trust_code)
    return _load_from_run(str(source), cfg, device)


def _run_config(runs_dir: Path, run: str, trust_code: bool = False):
    from shared.config import load_config

    cfg_path = runs_dir / run / CONFIG_FILE
    try:
        doc = msgspec.json.decode(cfg_path.read_bytes())
    except (OSError, msgspec.DecodeError) as exc:
        raise BotRefused(f"run {run!r}: cannot read its config at {cfg_path} ({exc}); runs_dir is where "
                         "run folders live (default runs)") from None
    _check_code(doc, f"run {run!r} ({cfg_path})", trust_code)
    doc["runs_dir"], doc["run_name"] = str(runs_dir), run
    return load_config(doc)


def _check_code(doc, source: str, trust_code: bool) -> None:
    """BotRefused when ``doc`` (a folder's config.json) names modules this machine does not
    allow (shared.components.check_declared), before anything is imported."""
    from shared.components import ComponentError, check_declared

    try:
        check_declared(doc, source, trust=trust_code)
    except ComponentError as exc:
        raise BotRefused(str(exc)) from None


def _load_from_run(player: str, cfg, device: str) -> Bot:
    from royalefleet.players import resolve
    from services.checkpoint.snapshots import SnapshotStore
    from shared.messages import snapshot_of
    from shared.run_dir import RunDir

    from royalefleet.bot_search import with_search
    from shared.search.spec import split_search

    base, search = split_search(resolve(player, cfg))
    pid = base
    sid = snapshot_of(pid)
    if sid is None or "+" in sid:
        raise ValueError(f"player {player!r}: a bot is a snapshot of the run (snap:<id>, latest or champion), "
                         "searching or not (+search:N[:D])")
    actor, spec = SnapshotStore(RunDir.of(cfg.runs_dir, cfg.run_name).snapshots).read(sid)
    doc = msgspec.json.decode(spec)
    manifest = BotManifest(format=EXPORT_FORMAT, player=pid, run_name=cfg.run_name, iteration=int(doc.get("iteration", -1)),
                           env_steps=int(doc.get("env_steps", -1)), actor_sha256=hashlib.sha256(actor).hexdigest(),
                           engine={})
    return with_search(_bot(pid, actor, spec, cfg, manifest, device), search)


def _load_export(folder: Path, device: str, trust_code: bool = False) -> Bot:
    from shared.config import load_config

    try:
        manifest = msgspec.json.decode((folder / BOT_FILE).read_bytes(), type=BotManifest)
        actor = (folder / ACTOR_FILE).read_bytes()
        spec = (folder / SPEC_FILE).read_bytes()
        doc = msgspec.json.decode((folder / CONFIG_FILE).read_bytes())
        _check_code(doc, f"bot folder {folder}", trust_code)
        cfg = load_config(doc)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BotRefused(f"{folder}: not a readable exported bot ({exc}); export it again with "
                         "royalefleet export snap:<id> OUT") from None
    digest = hashlib.sha256(actor).hexdigest()
    if digest != manifest.actor_sha256:
        raise BotRefused(f"{folder / ACTOR_FILE}: sha256 {digest[:16]}... is not the manifest's "
                         f"{manifest.actor_sha256[:16]}...: the weights were changed or damaged; export the bot again")
    return _searching(_bot(manifest.player, actor, spec, cfg, manifest, device), folder)


def _searching(bot: Bot, folder: Path) -> Bot:
    """An exported bot with the search ``bot.json`` records (royalefleet/bot_search.py), or
    itself. Raises BotRefused for a budget outside the search's ranges."""
    if bot.manifest.search is None:
        return bot
    from royalefleet.bot_search import with_search
    from shared.search.spec import SEARCH_MARK, split_search

    budget = bot.manifest.search
    try:
        _, spec = split_search(f"{bot.id}{SEARCH_MARK}{int(budget['candidates'])}:{int(budget['depth'])}")
    except (KeyError, TypeError, ValueError) as exc:
        raise BotRefused(f"{folder / BOT_FILE}: search {budget!r}: {exc}; expected {{\"candidates\": N, "
                         "\"depth\": D}, or export the bot again") from None
    return with_search(bot, spec)


def _bot(player: str, actor: bytes, spec: bytes, cfg, manifest: BotManifest, device: str) -> Bot:
    import torch

    from services.evaluator.players import SnapshotRefused, load_snapshot_player, run_facts
    from shared.nn.policy import Policy

    facts = run_facts(cfg)
    here = msgspec.to_builtins(facts.engine)
    if manifest.engine:
        differ = sorted(k for k in manifest.engine if manifest.engine.get(k) != here.get(k))
        if differ:
            raise BotRefused(f"bot {player}: engine {', '.join(f'{k} {manifest.engine[k]!r} (here {here.get(k)!r})' for k in differ)}; "
                             "it was trained on another RoyaleGym build: install the one it names "
                             f"(royalegym {manifest.engine.get('royalegym_version')}) or export a bot trained here")
    else:
        manifest.engine = here
    try:
        loaded = load_snapshot_player(player, actor, spec, cfg, facts)
    except SnapshotRefused as exc:
        raise BotRefused(str(exc)) from None
    if loaded.policy.frame_stack != 1:
        raise BotRefused(f"bot {player}: its run stacks {loaded.policy.frame_stack} decisions (obs.frame_stack); "
                         "load_bot plays snapshots without frame stacking")
    if device != "cpu":
        loaded.policy = Policy(loaded.policy.model, facts.codec, torch.device(device))
    return Bot(loaded, cfg, manifest, actor, spec)


def export_bot(bot: Bot, out: str | os.PathLike) -> Path:
    """Write ``bot`` as a folder ``load_bot`` reads without its run: the snapshot's own two files
    byte for byte, the run's config and ``bot.json`` (written last, so a folder that has one is
    whole; each file is replaced atomically). Raises FileExistsError when ``out`` holds a bot
    already, OSError when it cannot be written."""
    from shared.durable import replace_file

    folder = Path(out)
    if (folder / BOT_FILE).exists():
        raise FileExistsError(f"{folder} holds a bot already ({BOT_FILE}); choose another folder or remove it")
    folder.mkdir(parents=True, exist_ok=True)
    replace_file(folder / ACTOR_FILE, bot.actor_bytes)
    replace_file(folder / SPEC_FILE, bot.spec_bytes)
    replace_file(folder / CONFIG_FILE, msgspec.json.encode(bot.config))
    replace_file(folder / BOT_FILE, msgspec.json.encode(bot.manifest) + b"\n")
    return folder
