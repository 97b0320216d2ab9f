"""``royalefleet clone [RUN] --demos NAME``: the run's network trained to copy demonstrations,
written as a snapshot of the run.

    royalefleet demos record myrun --teacher scripted:defend --battles 600 --workers 2
    royalefleet clone myrun --demos defend-600
    royalefleet eval snap:<id> scripted:random_legal --games 200 --run-name myrun

Training is royalefleet/clone.py's (masked cross-entropy on choice rows, the critic on the
returns, validation split by battle, early stopping). The actor is written through the run's
snapshot store (``<run>/snapshots/<id>/``: ``actor.safetensors`` fp16 and ``spec.json``, the
files the learner's snapshots have), so ``eval``, ``play``, ``strength`` and
``ladder.pool.seed_snapshots`` take ``snap:<id>``. Its spec adds ``clone`` (the demonstrations'
digest, teachers, epochs, validation figures) and ``probe`` (validation rows with their
log-probabilities, shared/nn/probes.py), verified here after the write by loading the snapshot
back as every player loads it. The critic (no snapshot holds one) and the epoch table go to
``<run>/clones/<id>/`` (``critic.safetensors``, ``report.json``, which also keeps the held-out
misses by kind and, for a searching teacher's set, the held-out agreement by the search's margin:
royalefleet/clone_margins.py).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np

from royalefleet.clone import CloneSettings, describe_misses, miss_kinds
from royalefleet.clone_margins import agreement_by_margin, describe_by_margin
from royalefleet.run_options import add_run_argument, add_run_options, run_config

def add_parser(subparsers) -> argparse.ArgumentParser:
    cp = subparsers.add_parser(
        "clone", help="train the run's network to copy demonstrations; writes a snapshot snap:<id>",
        description="Behaviour cloning into the network the run's config builds: masked cross-entropy on the "
        "demonstrations' choice rows (forced rows carry nothing), the critic on their returns, a validation "
        "split by battle with early stopping, deterministic. Prints one line per epoch and writes a snapshot "
        "that eval, play, strength and the pool take.")
    add_run_argument(cp)
    cp.add_argument("--demos", action="append", required=True, metavar="NAME",
                    help="a demonstration set: its name under <run>/demos/ (royalefleet demos list) or a folder; "
                    "repeat for several. When every set is given as a folder (another run's), RUN may be a new run")
    d = CloneSettings()
    for f in fields(CloneSettings):
        flag, default, words = "--" + f.name.replace("_", "-"), getattr(d, f.name), SETTING_HELP.get(f.name, "")
        if isinstance(default, bool):  # a switch: argparse's type=bool would read "False" as True
            cp.add_argument(flag, action="store_true", help=words.rstrip())
        else:
            cp.add_argument(flag, type=type(default), default=default, metavar=SETTING_METAVAR.get(f.name),
                            help=words + (f"(default {default})" if default != "" else "(default: none)"))
    add_run_options(cp, "the run whose network, codec and snapshot store the clone uses")
    cp.set_defaults(func=cmd_clone)
    return cp


SETTING_HELP = {
    "soft_tau": "above 0: a searched row trains on softmax(score / TAU) over the candidates its teacher's search "
                "chose among (sets recorded by a +search teacher keep the scores), not on its one move; scores are "
                "on the search's scale (tanh(board / vs) with vs=S) ",
    "margin_weight": "above 0: weight a searched row's loss 1 + W x the search's margin (its best score minus the "
                     "runner-up's), so clear decisions weigh more than close ones ",
    "keep_last": "keep the last epoch's weights, not the best validation cross-entropy's (give --patience at least "
                 "--max-epochs to train them all) ",
    "init": "snap:<id>, a snapshot of the run to start from (its actor, and the critic its clone kept), not fresh "
            "weights: a generation fine-tuned from its predecessor on new labels (a smaller --actor-lr keeps more of "
            "it) ",
    "soft_all": "with --soft-tau: the softmax over every candidate the search scored, sequential halving's losers "
                "too, not only its survivors ",
}
"""Help for the clone settings that need more than their default."""

SETTING_METAVAR = {"init": "snap:<id>"}

SLOT_ORDER_WARN = 0.9
"""The share of a set's choices (two or more hand slots playable) on which its teacher played
the first playable slot, from which a clone without ``net.slot_index`` is warned: a player
indifferent to hand order does so on about 1 / (playable slots) of them, RoyaleGym's rungs on
all of them."""


def cmd_clone(args, out=None) -> int:
    from royalefleet.clone_data import first_slot_share, load_rows, resolve_set, split_by_battle
    from shared.demos import DemosError
    from shared.run_dir import RunDir

    out = out or sys.stdout
    say = lambda s: (out.write(s + "\n"), out.flush())  # noqa: E731
    # Sets named by their folders need no run folder yet: a new run (another network, say) may
    # clone another run's demonstrations, and the snapshot store makes the folder.
    cfg = run_config(args, must_exist=not all(Path(n).is_dir() for n in args.demos))
    run = RunDir.of(cfg.runs_dir, cfg.run_name)
    settings = CloneSettings(**{f.name: getattr(args, f.name) for f in fields(CloneSettings)})
    if cfg.obs.frame_stack != 1:
        print(f"royalefleet clone: obs.frame_stack is {cfg.obs.frame_stack}; cloning reads one decision a row and "
              "supports obs.frame_stack 1 only (not yet the stacked history)", file=sys.stderr)
        return 2
    try:
        folders = [resolve_set(n, run.demos) for n in args.demos]
    except FileNotFoundError as exc:
        print(f"royalefleet clone: {exc}", file=sys.stderr)
        return 2
    pf, digests, ident = run_facts(cfg)
    try:
        rows = load_rows(folders, digests, survivors_only=not settings.soft_all)
        train, val = split_by_battle(rows, cfg.master_seed)
    except (DemosError, ValueError) as exc:
        print(f"royalefleet clone: {exc}", file=sys.stderr)
        return 2
    n_choice = int(rows.choice.sum())
    if (settings.soft_tau > 0 or settings.margin_weight > 0) and rows.search_actions is None:
        print(f"royalefleet clone: --soft-tau {settings.soft_tau} --margin-weight {settings.margin_weight}: no set "
              "holds a searching teacher's scores "
              f"({', '.join(args.demos)}: an unsearched teacher, or recorded before scores were kept); record one with "
              "a +search teacher (royalefleet demos record --teacher <player>+search:N), or leave both out",
              file=sys.stderr)
        return 2
    chance = chance_agreement(val, pf.codec)
    say(f"royalefleet clone: {len(folders)} set(s), digest {rows.digest}: {n_choice:,} choice rows to copy "
        f"({rows.forced_rows:,} forced rows carry nothing for the actor; {len(rows.actions) - n_choice:,} of them kept "
        f"for the critic), {rows.illegal_left_out} choice row(s) left out whose action our mask refuses; "
        f"{len(set(train.battles.tolist()))} battles to train, {len(set(val.battles.tolist()))} to validate "
        f"(chance top-1 agreement on them {chance:.4f})")
    share, n_order = first_slot_share(rows, pf.codec, pf.spec.hand_slots)
    if not cfg.net.slot_index and n_order and share >= SLOT_ORDER_WARN:
        say(f"royalefleet clone: the teacher played its first playable hand slot on {share:.3f} of the {n_order:,} "
            "choices where two or more slots were playable, and net.slot_index is off: this network cannot tell "
            "two slots apart, so it will miss many of them. For a network that can, start a new run whose config "
            "sets {\"net\": {\"slot_index\": true}} (docs/design.md, \"The pointer query knows its slot\").")
    if settings.soft_tau > 0:
        n_soft = int((np.isfinite(rows.search_scores).any(axis=1) & rows.choice).sum())
        say(f"royalefleet clone: soft targets at tau {settings.soft_tau}: {n_soft:,} of the {n_choice:,} choice rows "
            "train on softmax(score / tau) over the candidates their search chose among, the rest on their move")
    init = None
    if settings.init:
        from royalefleet.clone_init import InitRefused, load_init

        try:
            init = load_init(settings.init, run, pf.spec, cfg.net, pf.codec, ident)
        except InitRefused as exc:
            print(f"royalefleet clone: {exc}", file=sys.stderr)
            return 2
    apply_threads(cfg)
    from royalefleet.clone import train_clone

    result = train_clone(pf.spec, cfg.net, pf.codec, train, val, cfg.master_seed, settings, say, init)
    b = result.best
    kept = "last epoch (--keep-last)" if settings.keep_last else "best epoch"
    say(f"royalefleet clone: {result.stopped}; {kept} {result.best_epoch}: validation CE {b.val_ce:.4f}, "
        f"top-1 agreement {b.val_agreement:.3f} (chance {chance:.4f}), policy entropy {b.val_entropy:.2f} nats")
    picks = held_out_picks(result.model, pf, val)
    kinds = miss_kinds(picks, val.actions[val.choice], pf.spec.height, pf.spec.width, pf.spec.hand_slots)
    kept_words = "the last epoch" if settings.keep_last else "the best epoch"
    say(describe_misses(kinds, int(val.choice.sum()), kept_words))
    bands = [] if val.search_actions is None or settings.soft_all else agreement_by_margin(
        picks, val.actions[val.choice], val.search_actions[val.choice], val.search_scores[val.choice])
    for line in describe_by_margin(bands, kept_words):
        say(line)
    sid = write_clone(cfg, run, pf, ident, result, rows, val, settings, chance, say, kinds, bands)
    say(f"royalefleet clone: wrote snap:{sid}; play it with `royalefleet eval snap:{sid} scripted:random_legal "
        f"--games 200 --run-name {cfg.run_name}`")
    say("royalefleet clone: to hold it in a new run's pool from the first iteration (never evicted), add to that "
        "run's config: " + seed_entry(run.snapshots / sid))
    return 0


def recorded_settings(settings) -> dict:
    """The clone's settings as its snapshot's spec records them: ``soft_tau``, ``soft_all``,
    ``margin_weight``, ``keep_last`` and ``init`` only when set, so a clone of moves keeps the snapshot id it
    had before they existed."""
    out = asdict(settings)
    for name in ("soft_tau", "soft_all", "margin_weight", "keep_last", "init"):
        if not out[name]:
            del out[name]
    return out


def seed_entry(folder) -> str:
    """The ``ladder.pool.seed_snapshots`` config (JSON) that seeds a run's pool with the snapshot
    in ``folder`` (shared/config.py SeedSnapshot: path, the sha256 of actor.safetensors, weight 1)."""
    import hashlib
    import json

    from services.checkpoint.snapshots import ACTOR

    digest = hashlib.sha256((folder / ACTOR).read_bytes()).hexdigest()
    return json.dumps({"ladder": {"pool": {"seed_snapshots": [{"path": str(folder), "sha256": digest,
                                                                  "weight": 1.0}]}}})


def chance_agreement(rows, codec) -> float:
    """The top-1 agreement of a uniformly random legal choice with the teacher on ``rows``' choice
    rows: the mean of 1 / n_legal (the no-op counted among the legal), n_legal from each packed
    row's mask bits. 0.0 without choice rows."""
    from shared.codec import legal_counts

    if not rows.choice.any():
        return 0.0
    return float(np.mean(1.0 / legal_counts(rows.observations[rows.choice], codec.omask)))


def run_facts(cfg):
    """(preflight, the DemoDigests rows must carry, the identity digests a snapshot spec names)."""
    from shared.codec import CODEC_VERSION, table_digest
    from shared.demos import DemoDigests
    from shared.identity import config_digests
    from shared.preflight import run_preflight

    pf = run_preflight(cfg.env, cfg.master_seed, frame_stack=cfg.obs.frame_stack)
    cd = config_digests(cfg)
    digests = DemoDigests(env_spec_digest=cd["env_spec_digest"], obs_digest=pf.spec.digest(),
                          codec_table_digest=table_digest(pf.table), codec_version=CODEC_VERSION,
                          row_bytes=pf.codec.row_bytes)
    ident = {"arch_digest": cd["arch_digest"], "obs_digest": digests.obs_digest,
             "codec_table_digest": digests.codec_table_digest}
    return pf, digests, ident


def apply_threads(cfg) -> None:
    """The run's torch thread count, and deterministic algorithms under ``run_exact``."""
    import torch

    from services.learner.determinism import set_deterministic_algorithms

    torch.set_num_threads(cfg.determinism.torch_threads)
    if cfg.determinism.tier == "run_exact":
        set_deterministic_algorithms(True)


def held_out_picks(model, pf, val) -> np.ndarray:
    """(n,) int64: the trained model's argmax on the n validation choice rows, in row order."""
    from royalefleet.clone import evaluate

    picks: list = []
    evaluate(model, pf.codec, val, picks=picks)
    return np.concatenate(picks) if picks else np.zeros(0, np.int64)


def write_clone(cfg, run, pf, ident, result, rows, val, settings, chance, say, misses=None, by_margin=None) -> str:
    """The snapshot (through the run's SnapshotStore), its probe verified after loading it back,
    the critic and the report under ``<run>/clones/<id>/``; the snapshot id."""
    import copy

    import msgspec

    from services.checkpoint.snapshots import SnapshotStore
    from shared.durable import replace_file
    from shared.nn.probes import PROBE_ROWS, make_probe, verify_probe
    from shared.nn.snapshot import actor_builder, check_spec, load_frozen_actor
    from shared.nn.statefiles import module_to_bytes

    model = result.model
    blob = module_to_bytes(copy.deepcopy(model.actor).half())
    stored = load_frozen_actor("new clone", blob, actor_builder(pf.spec, cfg.net))
    pick = np.flatnonzero(val.choice)[:PROBE_ROWS]
    probe = make_probe(stored, pf.codec, val.observations[pick], val.actions[pick])
    b = result.best
    spec = {"run_id": f"clone:{rows.digest}", "iteration": 0, "env_steps": 0, **ident, "dtype": "float16",
            "clone": {"demos_digest": rows.digest, "demo_sets": [m.name for m in rows.manifests],
                      "teachers": sorted({t for m in rows.manifests for t in m.teachers}),
                      "best_epoch": result.best_epoch, "epochs": len(result.epochs),
                      "val_ce": b.val_ce, "val_agreement": b.val_agreement, "chance_agreement": chance,
                      "settings": recorded_settings(settings)},
            "probe": probe}
    sid, folder, created = SnapshotStore(run.snapshots).write(blob, msgspec.json.encode(spec))
    actor_bytes, spec_bytes = SnapshotStore(run.snapshots).read(sid)
    doc = check_spec(sid, spec_bytes, ident)
    diff = verify_probe(sid, load_frozen_actor(sid, actor_bytes, actor_builder(pf.spec, cfg.net)), pf.codec,
                        doc["probe"])
    say(f"royalefleet clone: snapshot {sid} {'written' if created else 'already stored (same weights)'} at {folder}; "
        f"loaded back, its {len(pick)} probe rows verify (largest difference {diff:.2g} nats)")
    out = run.clones / sid
    replace_file(out / "critic.safetensors", module_to_bytes(model.critic))
    replace_file(out / "report.json", msgspec.json.format(msgspec.json.encode(
        {"snapshot": sid, "demos_digest": rows.digest, "stopped": result.stopped, "best_epoch": result.best_epoch,
         "epochs": [asdict(e) for e in result.epochs], "illegal_left_out": rows.illegal_left_out,
         "held_out_misses": misses or {}, "held_out_by_margin": by_margin or []}), indent=1))
    return sid

