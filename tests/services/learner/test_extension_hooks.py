"""Learner extensions (issue 27 items 6, 3, 4): the hooks of shared/learner_extension.py in the
PPO update (an actor-loss term's value and gradient by hand, the learning-rate multiplier, no
change without one), the warm start from a clone snapshot (weights, critic, probe refusal, hold,
resume) and the KL anchor (its value on a tiny distribution, beta's rule, forced rows)."""

from __future__ import annotations

import copy
import math

import msgspec
import numpy as np
import pytest
import torch

from services.learner import checkpointing, extension_hooks
from services.learner.extensions.imitation import ImitationSection, KlAnchor, adapt_beta, kl_to_reference
from services.learner.extensions.warm_start import WarmStart, WarmStartSection
from services.learner.ppo import ppo_update
from shared.learner_extension import ActorLoss, LearnerExtension
from tests.services.learner.rig import build_learner, tiny_config
from tests.services.learner.test_ppo import HAND, HAND_LOGITS, HAND_PPO, HAND_VALUES, TableModel, epochs, table_data

LN3 = math.log(3.0)


def sgd_update(extensions=(), lr_actor=1.0):
    """HAND's update at SGD lr 1 (each parameter moves by minus its gradient): metrics, grads."""
    model = TableModel(HAND_LOGITS, HAND_VALUES)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt_a = torch.optim.SGD(model.actor.parameters(), lr=lr_actor)
    opt_c = torch.optim.SGD(model.critic.parameters(), lr=1.0)
    metrics = ppo_update(model, opt_a, opt_c, table_data(**HAND), HAND_PPO, epochs(), "cpu", ent_coef=0.5,
                         ent_coef_noop=0.0, extensions=extensions, iteration=3)
    return metrics, {n: (before[n] - p.detach()).numpy() for n, p in model.named_parameters()}


class Recorder(LearnerExtension):
    """Adds nothing; records what the update showed it."""

    def __init__(self):
        self.seen = []

    def actor_loss(self, terms):
        self.seen.append((terms.mask.shape, terms.batch_rows, terms.iteration, terms.epoch))
        return None


def test_an_extension_that_adds_nothing_leaves_the_update_exactly_as_it_was():
    plain, plain_grads = sgd_update()
    rec = Recorder()
    hooked, hooked_grads = sgd_update((rec,))
    assert hooked == plain
    for name in plain_grads:
        assert np.array_equal(hooked_grads[name], plain_grads[name])
    # the actor loss sees the choice rows only (rows 0 and 1 of 4), the batch's 4 rows, iteration and epoch
    assert rec.seen == [(torch.Size([2, 3]), 4, 3, 0)]


class Anchor(KlAnchor):
    """The KL anchor with pi_ref a table: row 0 logits [ln 3, 0, 0], row 1 [0, 0, 0]."""

    def __init__(self, beta):
        super().__init__(ImitationSection(reference="snap:0123456789abcdef", beta=beta, kl_budget=0.05))
        table = torch.tensor([[LN3, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
        self.reference = lambda obs: table[obs["row"]]


def test_the_kl_term_by_hand_on_a_tiny_distribution():
    # row 0: pi = [1/2, 1/2, -] on its legal pair, pi_ref = [3/4, 1/4]: KL = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3)
    # row 1: pi = [1/4, 1/4, 1/2], pi_ref uniform: KL = 1/2 ln(3/4) + 1/2 ln(3/2) = 1/2 ln(9/8)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    pi = torch.log_softmax(torch.tensor([[0.0, 0.0, -1e30], [0.0, 0.0, math.log(2)]]), -1)
    ref = torch.log_softmax(torch.tensor([[LN3, 0.0, -1e30], [0.0, 0.0, 0.0]]), -1)
    kl = kl_to_reference(pi.masked_fill(~mask, torch.finfo(torch.float32).min), ref, mask)
    assert kl.tolist() == pytest.approx([0.5 * math.log(4 / 3), 0.5 * math.log(9 / 8)], abs=1e-6)
    assert 0.5 * math.log(4 / 3) == pytest.approx(0.143841, abs=1e-6)


def test_the_anchor_in_the_update_adds_beta_times_its_gradient_and_reports_the_choice_rows_mean():
    plain, plain_grads = sgd_update()
    beta = 0.4
    metrics, grads = sgd_update((Anchor(beta),))
    # KL measured before the (single) step, mean over the 2 choice rows; forced rows 2, 3 carry nothing
    assert metrics["imitation/kl"] == pytest.approx((0.5 * math.log(4 / 3) + 0.5 * math.log(9 / 8)) / 2, abs=1e-6)
    # dKL/dz_j = pi_j (ln pi_j - ln q_j - KL); row 0: [1/2 (ln(2/3) - KL0), 1/2 (ln 2 - KL0), 0];
    # the term is beta * sum KL / 4 rows, so row 0's actor gradient grows by beta / 4 times that.
    kl0 = 0.5 * math.log(4 / 3)
    row0 = np.array([0.5 * (math.log(2 / 3) - kl0), 0.5 * (math.log(2) - kl0), 0.0])
    assert grads["actor.table"][0] - plain_grads["actor.table"][0] == pytest.approx(beta / 4 * row0, abs=1e-6)
    # row 1: pi = [1/4, 1/4, 1/2], q uniform, KL1 = 1/2 ln(9/8)
    kl1 = 0.5 * math.log(9 / 8)
    row1 = np.array([0.25 * (math.log(3 / 4) - kl1), 0.25 * (math.log(3 / 4) - kl1), 0.5 * (math.log(3 / 2) - kl1)])
    assert grads["actor.table"][1] - plain_grads["actor.table"][1] == pytest.approx(beta / 4 * row1, abs=1e-6)
    # forced rows: no actor gradient from the anchor; the critic's untouched
    assert np.array_equal(grads["actor.table"][2:], plain_grads["actor.table"][2:])
    assert np.array_equal(grads["critic.table"], plain_grads["critic.table"])


@pytest.mark.parametrize("beta,kl,expected", [
    (0.1, 0.0751, 0.2),     # above 1.5 x 0.05 = 0.075: doubled
    (0.1, 0.075, 0.1),      # at the band's edge: kept
    (0.1, 0.05, 0.1),
    (0.1, 0.0334, 0.1),     # 0.05 / 1.5 = 0.0333...: inside
    (0.1, 0.0333, 0.05),    # below: halved
    (8.0, 1.0, 10.0),       # doubled to 16, bounded by beta_max 10
    (1.5e-4, 0.0, 1e-4),    # halved to 7.5e-5, bounded by beta_min 1e-4
])
def test_beta_doubles_above_the_band_halves_below_it_within_its_bounds(beta, kl, expected):
    assert adapt_beta(beta, kl, 0.05, 1e-4, 10.0) == pytest.approx(expected, rel=1e-12)


def test_end_update_reports_the_beta_used_adapts_it_and_holds_it_while_the_actor_is_held():
    anchor = Anchor(0.1)
    out = anchor.end_update({"imitation/kl": 0.2, "ppo/actor_frozen": 0.0})
    assert out == {"imitation/beta": 0.1, "imitation/kl_budget": 0.05, "imitation/kl_budget_ratio": pytest.approx(4.0),
                   "imitation/beta_next": 0.2, "imitation/beta_at_floor": 0.0}
    held = anchor.end_update({"imitation/kl": 0.0, "ppo/actor_frozen": 1.0})
    assert held["imitation/beta"] == held["imitation/beta_next"] == 0.2
    assert anchor.state() == {"beta": 0.2}
    again = Anchor(0.1)
    again.load_state(anchor.state())
    assert again.beta == 0.2


def test_the_learning_rate_multiplier_is_the_product_and_zero_holds_the_actor():
    class Half(LearnerExtension):
        def actor_lr_multiplier(self, iteration, env_steps):
            return 0.5

    hold = WarmStart(WarmStartSection(snapshot="snap:0123456789abcdef", hold_actor_iterations=2))
    assert [extension_hooks.lr_multiplier((hold, Half()), i, 0) for i in (1, 2, 3)] == [0.0, 0.0, 0.5]
    assert extension_hooks.lr_multiplier((), 1, 0) == 1.0

    class Bad(LearnerExtension):
        def actor_lr_multiplier(self, iteration, env_steps):
            return -1.0

    with pytest.raises(ValueError, match=r"Bad.actor_lr_multiplier\(4, 7\) returned -1.0"):
        extension_hooks.lr_multiplier((Bad(),), 4, 7)
    # under scaled_lr(0) Adam leaves the actor's weights as they were and the critic trains; lr restored after
    model = TableModel(HAND_LOGITS, HAND_VALUES)
    opt_a = torch.optim.Adam(model.actor.parameters(), lr=0.1)
    opt_c = torch.optim.Adam(model.critic.parameters(), lr=0.1)
    actor0, critic0 = model.actor.table.detach().clone(), model.critic.table.detach().clone()
    with extension_hooks.scaled_lr(opt_a, 0.0):
        ppo_update(model, opt_a, opt_c, table_data(**HAND), HAND_PPO, epochs(), "cpu", ent_coef=0.5, ent_coef_noop=0.0)
    assert torch.equal(model.actor.table, actor0) and not torch.equal(model.critic.table, critic0)
    assert opt_a.param_groups[0]["lr"] == 0.1


def test_an_actor_loss_that_is_not_a_scalar_is_refused_by_name():
    class Wide(LearnerExtension):
        def actor_loss(self, terms):
            return ActorLoss(terms.log_probs.sum(dim=-1), {})

    with pytest.raises(ValueError, match=r"Wide.actor_loss returned a loss of shape \(2,\)"):
        sgd_update((Wide(),))


# ----------------------------------------------------------------------------- the warm start


def write_clone(learner, *, perturb=0.25, critic=True, break_probe=False, with_probe=True) -> str:
    """A clone snapshot in the learner's run: its actor the learner's own plus ``perturb`` on
    every weight, probe rows of synthetic observations (all planes zero, 40 legal actions)."""
    from services.checkpoint.snapshots import SnapshotStore
    from shared.durable import replace_file
    from shared.nn.probes import make_probe
    from shared.nn.snapshot import actor_builder, load_frozen_actor
    from shared.nn.statefiles import module_to_bytes
    from shared.run_dir import RunDir

    p = learner.parts
    codec = p.pf.codec
    actor = copy.deepcopy(p.model.actor)
    with torch.no_grad():
        for w in actor.parameters():
            w.add_(perturb)
    blob = module_to_bytes(actor.half())
    stored = load_frozen_actor("new", blob, actor_builder(p.pf.spec, p.cfg.net))
    rows = np.zeros((3, codec.row_bytes), np.uint8)
    mask = np.zeros(p.pf.spec.n_actions, bool)
    mask[:40] = True
    rows[:, codec.omask:] = np.packbits(mask, bitorder="little")[: codec.row_bytes - codec.omask]
    probe = make_probe(stored, codec, rows, np.array([0, 5, 39]))
    if break_probe:
        probe["log_probs"][1] += 0.01
    ident = p.identity
    spec = {"run_id": "clone:test", "iteration": 0, "env_steps": 0, "arch_digest": ident.arch_digest,
            "obs_digest": ident.obs_digest, "codec_table_digest": ident.codec_table_digest, "dtype": "float16",
            **({"probe": probe} if with_probe else {})}
    run = RunDir(p.run_dir)
    sid, _, _ = SnapshotStore(run.snapshots).write(blob, msgspec.json.encode(spec))
    if critic:
        c = copy.deepcopy(p.model.critic)
        with torch.no_grad():
            for w in c.parameters():
                w.add_(0.5)
        replace_file(run.clones / sid / "critic.safetensors", module_to_bytes(c))
    return sid


def warm_learner(tmp_path, section, lines):
    cfg = tiny_config(run_name="warm", warm_start=section)
    learner = build_learner(str(tmp_path), cfg, say=lines.append)
    return learner


def test_a_fresh_run_starts_from_the_clone_actor_and_critic_and_says_so(tmp_path):
    lines: list[str] = []
    base = build_learner(str(tmp_path), tiny_config(run_name="warm"))
    sid = write_clone(base)
    learner = warm_learner(tmp_path, {"snapshot": f"snap:{sid}", "hold_actor_iterations": 2}, lines)
    p = learner.parts
    fresh_actor = copy.deepcopy(p.model.actor.state_dict())
    fresh_critic = copy.deepcopy(p.model.critic.state_dict())
    try:
        extension_hooks.start(p, fresh=True)
        for name, w in p.model.actor.state_dict().items():  # the clone's fp16 weights, upcast
            assert torch.equal(w, (fresh_actor[name] + 0.25).half().float()), name
        for name, w in p.model.critic.state_dict().items():
            assert torch.equal(w, fresh_critic[name] + 0.5), name
        assert lines == [f"learner: warm start: actor from snapshot {sid} (probe rows verify, largest difference "
                         f"0 nats), and critic from the clone's critic.safetensors; the actor is held still for "
                         f"iterations 1-2"]
        lines.clear()
        extension_hooks.start(p, fresh=False)
        assert lines == [f"learner: warm start from snap:{sid} not applied again: the run resumed a checkpoint, "
                         "whose weights it keeps"]
    finally:  # the rig caches the model by config: leave it as built
        p.model.actor.load_state_dict(fresh_actor)
        p.model.critic.load_state_dict(fresh_critic)


def test_a_clone_whose_probe_log_probs_differ_is_refused_naming_the_snapshot(tmp_path):
    base = build_learner(str(tmp_path), tiny_config(run_name="warm"))
    sid = write_clone(base, perturb=0.125, break_probe=True)
    learner = warm_learner(tmp_path, {"snapshot": f"snap:{sid}"}, [])
    before = copy.deepcopy(learner.parts.model.actor.state_dict())
    with pytest.raises(SystemExit) as exc:
        extension_hooks.start(learner.parts, fresh=True)
    assert str(exc.value).startswith(f"learner: refusing to start run 'warm': warm_start.snapshot: refusing snapshot "
                                     f"{sid}: snapshot {sid}: the loaded actor's probe log-probs differ from the "
                                     "stored ones by up to 0.01 nats")
    for name, w in learner.parts.model.actor.state_dict().items():
        assert torch.equal(w, before[name])
    missing = warm_learner(tmp_path, {"snapshot": "snap:00000000000000aa"}, [])
    with pytest.raises(SystemExit, match="warm_start.snapshot: no snapshot 00000000000000aa in"):
        extension_hooks.start(missing.parts, fresh=True)


def test_the_warm_start_is_in_the_run_identity():
    plain = tiny_config(run_name="warm")
    a = tiny_config(run_name="warm", warm_start={"snapshot": "snap:0123456789abcdef"})
    b = tiny_config(run_name="warm", warm_start={"snapshot": "snap:0123456789abcdee"})
    from shared.extensions import extension_records

    (ra,), (rb,) = extension_records(a.extensions), extension_records(b.extensions)
    assert (ra.section, ra.distribution) == ("warm_start", "royalefleet")
    assert ra.digest != rb.digest
    assert extension_records(plain.extensions) is None


def test_the_kl_budget_follows_its_schedule_over_env_steps():
    section = msgspec.convert({"reference": "snap:0123456789abcdef",
                               "kl_budget": {"kind": "linear", "start": 0.02, "end": 0.1, "over_env_steps": 1000}},
                              ImitationSection)
    anchor = KlAnchor(section)
    assert anchor.actor_lr_multiplier(1, 0) == 1.0 and anchor.budget == pytest.approx(0.02)
    anchor.actor_lr_multiplier(2, 500)
    assert anchor.budget == pytest.approx(0.06)
    anchor.actor_lr_multiplier(3, 5000)
    # beta rule against the scheduled budget: 0.12 < 1.5 x 0.1, > 0.1 / 1.5: kept
    assert anchor.end_update({"imitation/kl": 0.12})["imitation/beta_next"] == 0.1


def test_a_run_without_extensions_checkpoints_the_update_state_it_always_did(tmp_path):
    learner = build_learner(str(tmp_path))
    assert learner.parts.extensions == ()
    assert set(checkpointing.update_state(learner.parts)) == {"return_scaler", "lr_backoff"}


def choice_rectangle(learner):
    """tests/services/learner/test_stages.py's one-battle collection, its two learner cells made
    choice rows (40 legal actions, action 5 taken)."""
    from tests.services.learner.test_stages import T, advantages, collected

    c = collected(learner)
    codec = learner.parts.pf.codec
    mask = np.zeros(learner.parts.pf.spec.n_actions, bool)
    mask[:40] = True
    bits = np.packbits(mask, bitorder="little")[: codec.row_bytes - codec.omask]
    rect = c.rect
    for t in range(T):
        rect.rows[t, 0, codec.omask:] = bits
        rect.n_legal[t, 0], rect.actions[t, 0], rect.log_probs[t, 0] = 40, 5, math.log(1 / 40)
    trainable = np.zeros((T, 2), bool)
    trainable[:, 0] = True
    return c, advantages(trainable)


def test_the_update_holds_the_actor_for_the_warm_starts_iterations_and_a_plain_run_writes_no_extension_key(tmp_path):
    from services.learner.ppo.learner import run_update

    held = build_learner(str(tmp_path), tiny_config(run_name="held-update", warm_start={
        "snapshot": "snap:0123456789abcdef", "hold_actor_iterations": 1}))
    c, adv = choice_rectangle(held)
    sched = {"gamma": 0.99, "ent_coef": 0.01, "ent_coef_noop": 0.0}
    lr = [g["lr"] for g in held.parts.opt_actor.param_groups]
    one = run_update(held.train_context(), c.rect, adv, iteration=1, sched=sched, inference_precision=None).stats
    assert (one["ppo/actor_lr_multiplier"], one["ppo/actor_frozen"], one["ppo/update_magnitude_actor"]) == (0.0, 1.0, 0.0)
    assert one["ppo/update_magnitude_critic"] > 0.0
    assert [g["lr"] for g in held.parts.opt_actor.param_groups] == lr  # restored after the update
    two = run_update(held.train_context(), c.rect, adv, iteration=2, sched=sched, inference_precision=None).stats
    assert (two["ppo/actor_lr_multiplier"], two["ppo/actor_frozen"]) == (1.0, 0.0)
    assert two["ppo/update_magnitude_actor"] > 0.0
    plain = build_learner(str(tmp_path), tiny_config(run_name="plain-update"))  # its own cached model: it trains
    c, adv = choice_rectangle(plain)
    stats = run_update(plain.train_context(), c.rect, adv, iteration=1, sched=sched, inference_precision=None).stats
    assert stats["ppo/update_magnitude_actor"] > 0.0
    assert not [k for k in stats if k.startswith(("imitation/", "ext/")) or k in ("ppo/actor_lr_multiplier", "ppo/actor_frozen")]


def test_a_snapshot_without_probe_rows_and_a_clone_without_a_critic(tmp_path):
    base = build_learner(str(tmp_path), tiny_config(run_name="warm"))
    plain_sid = write_clone(base, perturb=0.0625, with_probe=False)
    learner = warm_learner(tmp_path, {"snapshot": f"snap:{plain_sid}"}, [])
    with pytest.raises(SystemExit) as exc:
        extension_hooks.start(learner.parts, fresh=True)
    assert str(exc.value) == (f"learner: refusing to start run 'warm': warm_start.snapshot: snapshot {plain_sid} carries "
                              "no probe rows: not a clone written by royalefleet clone, so nothing verifies it after loading")
    lines: list[str] = []
    sid = write_clone(base, perturb=0.03125, critic=False)
    learner = warm_learner(tmp_path, {"snapshot": f"snap:{sid}"}, lines)
    critic = copy.deepcopy(learner.parts.model.critic.state_dict())
    actor = copy.deepcopy(learner.parts.model.actor.state_dict())
    try:
        extension_hooks.start(learner.parts, fresh=True)
        assert lines[0].endswith("critic fresh (the clone folder holds no critic.safetensors)")
        for name, w in learner.parts.model.critic.state_dict().items():
            assert torch.equal(w, critic[name]), name
    finally:
        learner.parts.model.actor.load_state_dict(actor)


def test_alphazero_takes_a_warm_start_and_a_hook_its_update_does_not_run_is_refused_by_name(tmp_path):
    """Issue 37 item 4: AlphaZero honours the warm start's hooks (the weights at a fresh start,
    the actor's learning rate held at 0); the imitation anchor's actor-loss term, which only the
    PPO update runs, is refused naming the hook, and DQN, which runs none, refuses the warm start."""
    from services.learner import startup

    warm = {"snapshot": "snap:0123456789abcdef", "hold_actor_iterations": 1}
    parts = startup.build_model(tiny_config(run_name="az-warm", learner={"algorithm": "alphazero"}, warm_start=warm),
                                str(tmp_path), lambda text: None)
    assert parts["algorithm"].name == "alphazero" and [type(e).__name__ for e in parts["extensions"]] == ["WarmStart"]
    with pytest.raises(SystemExit) as exc:
        startup.build_model(tiny_config(run_name="az-anchor", learner={"algorithm": "alphazero"},
                                        imitation={"reference": "snap:0123456789abcdef"}),
                            str(tmp_path), lambda text: None)
    assert str(exc.value) == ("learner: the extension sections ['imitation'] hook into the PPO update "
                              "(KlAnchor.actor_loss, KlAnchor.end_update), which learner.algorithm alphazero does not "
                              "run: remove them or train with ppo")
    with pytest.raises(SystemExit) as exc:
        startup.build_model(tiny_config(run_name="dqn-warm", learner={"algorithm": "dqn"}, warm_start=warm),
                            str(tmp_path), lambda text: None)
    assert "WarmStart.fresh_start, WarmStart.resumed, WarmStart.actor_lr_multiplier" in str(exc.value)


def test_alphazero_holds_the_actor_still_for_the_warm_starts_iterations(tmp_path):
    """warm_start.hold_actor_iterations 1 under AlphaZero: iteration 1's update moves the critic
    and leaves every actor weight as it was (its learning rate times 0); iteration 2's moves it."""
    import dataclasses

    from services.learner.alphazero.book import SearchTarget
    from tests.services.learner.test_stages import T

    cfg = tiny_config(run_name="az-hold", learner={"algorithm": "alphazero"},
                      warm_start={"snapshot": "snap:0123456789abcdef", "hold_actor_iterations": 1})
    learner = build_learner(str(tmp_path), cfg)
    az, model = learner.parts.algorithm, learner.parts.model
    c, _ = choice_rectangle(learner)
    c.rect.obs_valid[:, 0] = True  # both transitions of the learner's seat arrived
    c.rect.step_valid[:, 0] = True
    probs = np.zeros(40, np.float32)
    probs[7] = 1.0  # the search's target: all on action 7 of the 40 legal
    for t in range(T):
        az.book.targets[(t, 0)] = SearchTarget(np.arange(40, dtype=np.int16), probs, 0.0, 1.0, True)
    actor, critic = (copy.deepcopy(m.state_dict()) for m in (model.actor, model.critic))
    lr = [g["lr"] for g in learner.parts.opt_actor.param_groups]
    assert az.train(c, learner.train_context()).update.n_train == T
    assert all(torch.equal(w, actor[n]) for n, w in model.actor.state_dict().items())
    assert not all(torch.equal(w, critic[n]) for n, w in model.critic.state_dict().items())
    assert [g["lr"] for g in learner.parts.opt_actor.param_groups] == lr  # restored after the update
    az.train(dataclasses.replace(c, iteration=2), learner.train_context())
    assert not all(torch.equal(w, actor[n]) for n, w in model.actor.state_dict().items())

