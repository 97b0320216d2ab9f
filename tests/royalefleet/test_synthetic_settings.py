"""``python -m royalefleet.synthetic`` takes its settings like every service
(``shared.service_settings``): the rollout's options plus exactly one role, record or replay."""

from __future__ import annotations

import pytest

from royalefleet.synthetic import PROG, Settings, parse_settings
from services.rollout.main import Settings as RolloutSettings


def test_the_rollouts_options_and_the_role_come_from_flags_else_variables():
    env = {"ROYALEFLEET_LEARNER": "tcp://127.0.0.1:7001", "ROYALEFLEET_BATTLES": "8", "ROYALEFLEET_SHARDS": "4",
           "ROYALEFLEET_MAX_MESSAGE_MB": "32", "ROYALEFLEET_SYNTHETIC_RECORD": "/tmp/rec"}
    a = parse_settings([], env)
    assert (a.learner, a.battles, a.shards, a.max_message_mb, a.record, a.replay) == \
        ("tcp://127.0.0.1:7001", 8, 4, 32, "/tmp/rec", None)
    assert a.metrics_port == RolloutSettings().metrics_port  # the rollout's default
    b = parse_settings(["--replay", "/tmp/x.rounds", "--learner", "tcp://127.0.0.1:7002"],
                       {"ROYALEFLEET_LEARNER": "tcp://127.0.0.1:7001"})
    assert (b.replay, b.record, b.learner) == ("/tmp/x.rounds", None, "tcp://127.0.0.1:7002")
    assert isinstance(b, RolloutSettings) and isinstance(b, Settings)


@pytest.mark.parametrize("argv, env, said", [
    ([], {}, "give exactly one of --record <folder> (ROYALEFLEET_SYNTHETIC_RECORD) or --replay <file> "
             "(ROYALEFLEET_SYNTHETIC_REPLAY); got neither"),
    (["--record", "/tmp/r"], {"ROYALEFLEET_SYNTHETIC_REPLAY": "/tmp/x.rounds"},
     "give exactly one of --record <folder> (ROYALEFLEET_SYNTHETIC_RECORD) or --replay <file> "
     "(ROYALEFLEET_SYNTHETIC_REPLAY); got both"),
    (["--record", "/tmp/r", "--battles", "6", "--shards", "4"], {},
     "--battles 6 must be a positive multiple of --shards 4"),
])
def test_no_role_both_roles_or_uneven_shards_exit_2_naming_it(argv, env, said, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_settings(argv, env)
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == f"{PROG}: error: {said}"


def test_a_replay_ignores_battles_that_are_no_multiple_of_shards():
    # the recording decides a replay's battles and shards (SyntheticRollout)
    assert parse_settings(["--replay", "/tmp/x.rounds", "--battles", "6", "--shards", "4"], {}).battles == 6


def test_help_names_both_roles_and_their_variables(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_settings(["--help"], {})
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for text in ("--record RECORD", "[env ROYALEFLEET_SYNTHETIC_RECORD; default none]", "--replay REPLAY",
                 "[env ROYALEFLEET_SYNTHETIC_REPLAY; default none]", "[env ROYALEFLEET_BATTLES; default 16]"):
        assert text in out, text
