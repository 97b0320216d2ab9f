"""shared/assignments.py: the one assignment table rule the rollout and the learner both apply."""

from shared.assignments import AssignmentTable
from shared.messages import Assignment


def a(battle, ordinal, opponent="scripted:noop"):
    return Assignment(battle, ordinal, "scripted", opponent, 0)


def test_a_plan_replaces_answers_keeps_in_flight_episodes_and_drops_the_past_and_the_gone():
    t = AssignmentTable()
    t.take([a(0, 3), a(0, 4), a(1, 7), a(2, 1)], live={0, 1, 2}, floor={0: 3, 1: 7, 2: 1})
    assert sorted(t) == [(0, 3), (0, 4), (1, 7), (2, 1)]
    # battle 0 is at ordinal 3 (in flight), battle 1 moved to 8, battle 2 is gone
    t.take([a(0, 3, "scripted:random_legal"), a(0, 4, "scripted:random_legal"), a(1, 8)],
           live={0, 1}, floor={0: 3, 1: 8}, in_flight={(0, 3), (1, 8)})
    assert sorted(t) == [(0, 3), (0, 4), (1, 8)]
    assert t[(0, 3)].opponent == "scripted:noop"  # began under the earlier answer: kept
    assert t[(0, 4)].opponent == "scripted:random_legal"  # not begun: the new answer
    assert t[(1, 8)].opponent == "scripted:noop"  # in flight but not held before: entered


def test_a_restart_floor_below_the_current_ordinal_keeps_those_entries():
    t = AssignmentTable()
    t.take([a(5, 2), a(5, 3), a(5, 9)], live={5}, floor={5: 2})
    assert sorted(t) == [(5, 2), (5, 3), (5, 9)]
    t.take([], live={5}, floor={5: 3})
    assert sorted(t) == [(5, 3), (5, 9)]
    t.take([], live={5}, floor={5: -1})  # a battle with no episode yet has no floor
    assert sorted(t) == [(5, 3), (5, 9)]
