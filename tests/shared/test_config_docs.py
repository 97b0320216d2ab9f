"""Every config field is documented, and ``royalefleet config --explain`` prints what the code
says about it (type and range, defaults per profile, run identity) beside its docstring."""

import msgspec
import pytest

from royalefleet import cli
from shared import config_docs
from shared.config import PosInt, RunConfig, tiny
from shared.identity import RunIdentity, compute_identity, config_identity
from shared.messages import EngineBuild


def test_every_config_field_has_a_docstring():
    missing = [f"{f.path} ({f.owner.__name__}.{f.name}, {config_docs._relative(f.source)}:{f.line})"
               for f in config_docs.fields() if not f.doc.strip()]
    assert not missing, (
        "config fields without documentation:\n  " + "\n  ".join(missing) + "\nadd a string literal on the line "
        "below each field in its struct: its unit, what it changes, anything about its range the type cannot say "
        "(a section: the struct's class docstring). `royalefleet config --explain FIELD` adds the type, the "
        "defaults and whether it is in the run identity, read off the code.")


def test_the_walk_covers_every_field_of_every_struct_once():
    paths = [f.path for f in config_docs.fields()]
    assert len(paths) == len(set(paths))
    leaves = set(msgspec.to_builtins(tiny()))
    assert leaves <= set(paths)  # every top-level key
    assert {"ppo.lr_backoff.kl_threshold", "env.reward_weights.crown", "ladder.pool.seed_snapshots[].sha256",
            "ladder.gate.champion_games", "services.wire_codec"} <= set(paths)

    def count(struct):
        n = 0
        for f in msgspec.structs.fields(struct):
            sub, _ = config_docs._struct_of(f.type)
            n += 1 + (count(sub) if sub is not None else 0)
        return n

    extension = [f.path for f in config_docs.extension_fields()]
    assert len(paths) == count(RunConfig) + len(extension)


def test_explain_lists_the_extension_sections_with_their_fields_and_defaults(capsys):
    from services.learner.extensions.warm_start import WarmStartSection
    from shared.extensions import FIRST_PARTY

    paths = [f.path for f in config_docs.fields()]
    assert set(FIRST_PARTY) <= set(paths)
    fields = msgspec.structs.fields(WarmStartSection)
    assert [p for p in paths if p.startswith("warm_start.")] == [f"warm_start.{f.name}" for f in fields]
    assert cli.main(["config", "--explain", "warm_start.hold_actor_iterations"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1:4] == ["  type      int, >= 0", "  default   0",
                                     "  identity  yes, when its section is named (the section's digest, "
                                     "extension_records)"]
    assert cli.main(["config", "--explain", "imitation"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("imitation  [section: ImitationSection, services/learner/extensions/imitation.py]\n")
    assert "imitation.reference  [" in out


@pytest.mark.parametrize("path, expected", [
    ("master_seed", ["master_seed"]),
    ("ppo.clip_range", ["algo_digest"]),
    ("net.autocast", ["algo_digest"]),  # the numbers change, the architecture does not
    ("net.device", []),
    ("net.channels", ["arch_digest"]),
    ("local.rollouts", ["rollout_digest"]),
    ("rollout.round_timeout_s", []),
    ("services.wire_codec", ["codec_version"]),
    ("services.learner_port", []),
    ("determinism.torch_threads", ["torch_threads"]),
    ("alarms.kl_high", []),
    ("evaluation.job_seeds", []),
    ("ladder.pool.seed_snapshots[].weight", ["ladder_digest"]),
    ("env.reward_weights.elixir", ["env_spec_digest"]),
    ("run_name", []),
    ("alphazero.candidates", ["algo_digest"]),  # only under learner.algorithm "alphazero", no profile's default
    ("dqn.n_step", ["algo_digest"]),
])
def test_identity_is_found_by_changing_the_field_alone(path, expected):
    assert config_docs.identity_fields(path) == expected


def test_config_identity_is_the_config_part_of_compute_identity():
    cfg = tiny()
    ident = compute_identity(cfg, engine=EngineBuild(**{f: "x" for f in EngineBuild.__struct_fields__}), obs_digest="o", action_digest="a", codec_table_digest="c",
                             device_kind="cpu:x", torch_version="t")
    part = config_identity(cfg)
    assert {k: getattr(ident, k) for k in part} == part
    assert set(part) < {f.name for f in msgspec.structs.fields(RunIdentity)}


def test_type_text_reads_the_range_off_the_annotation():
    assert config_docs.type_text(PosInt) == "int, >= 1"
    fields = {f.path: f for f in config_docs.fields()}
    assert config_docs.type_text(fields["ppo.clip_range"].annotation) == "float, > 0 and < 1"
    assert config_docs.type_text(fields["env.decision_ms"].annotation) == "int, >= 50 and <= 5000"
    assert config_docs.type_text(fields["ladder.pool.pfsp_weighting"].annotation) == \
        'one of "hard", "linear", "uniform", "variance"'
    assert config_docs.type_text(fields["ladder.mix"].annotation) == "[(float, >= 0), (float, >= 0), (float, >= 0)]"


def test_explain_one_field(capsys):
    assert cli.main(["config", "--explain", "rollout.battles"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("rollout.battles  [RolloutConfig.battles, shared/config_schema.py:")
    assert lines[1:4] == ["  type      int, >= 1",
                          "  default   16 (cpu; laptop 32, workstation 32, many_core 32, tiny 4)",
                          "  identity  yes (rollout_digest)"]
    assert "Battles one rollout process runs" in out


def test_explain_a_section_gives_it_and_its_fields(capsys):
    assert cli.main(["config", "--explain", "ppo.lr_backoff"]) == 0
    heads = [line.split("  [")[0] for line in capsys.readouterr().out.splitlines() if line and line[0] != " "]
    assert heads == ["ppo.lr_backoff", "ppo.lr_backoff.kl_threshold", "ppo.lr_backoff.patience",
                     "ppo.lr_backoff.factor", "ppo.lr_backoff.lr_min"]


def test_explain_with_no_field_lists_every_field(capsys):
    assert cli.main(["config", "--explain"]) == 0
    heads = [line.split("  [")[0] for line in capsys.readouterr().out.splitlines() if line and line[0] != " "]
    assert heads == [f.path for f in config_docs.fields()]


def test_an_unknown_field_is_refused_naming_close_matches(capsys):
    assert cli.main(["config", "--explain", "ppo.clip"]) == 2
    err = capsys.readouterr().err
    assert "config field 'ppo.clip': no such field; did you mean ppo.clip_range" in err
    with pytest.raises(config_docs.UnknownField, match="no such field; did you mean rollout.battles"):
        config_docs.lookup("rollout.batles")
    with pytest.raises(config_docs.UnknownField, match=r"'zzz': no such field \("):
        config_docs.lookup("zzz")


def test_what_a_docstring_says_about_the_identity_is_what_the_identity_does():
    """A field or section whose docstring says it is not in the run identity moves no identity
    field (every field under a section included); one that says it is in it moves one."""
    every = config_docs.fields()
    claims = 0
    for f in every:
        text = " ".join(f.doc.split()).lower()
        under = [g for g in every if not g.section and (g.path == f.path or g.path.startswith(f.path + "."))]
        if "never part of the run identity" in text or "not part of the run identity" in text:
            claims += 1
            moved = {g.path: config_docs.identity_fields(g.path) for g in under}
            assert not any(moved.values()), f"{f.path}: its docstring says not in the run identity, but {moved}"
        elif text.startswith("in the run identity") or ". in the run identity" in text:
            claims += 1
            assert config_docs.identity_fields(f.path), f"{f.path}: its docstring says in the run identity"
    assert claims >= 5  # checkpoint, checkpoint.max_failed_saves, alarms, evaluation, services.wire_codec
