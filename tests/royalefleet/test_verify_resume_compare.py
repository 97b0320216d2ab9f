"""Which row fields verify-resume compares (royalefleet/verify_resume.py ``_compare``): every
field but wall-clock ones, the resume's own keys and the fits of the evaluators' games, which
the evaluators play on their own clock (a resumed run has had more wall time to fit them)."""

from __future__ import annotations

from royalefleet.verify_resume import _compare

BASE = {"run/iteration": 2, "run/state_digest": "abc", "ladder/pool_size": 1, "ppo/kl": 0.01}


def test_rating_fits_and_strength_scores_that_only_one_run_has_are_not_differences():
    straight = [dict(BASE, **{"time/update_s": 0.6})]
    resumed = [dict(BASE, **{"time/update_s": 0.9, "ladder/champion_rating": 467.6, "ladder/champion_rating_se": 213.2,
                             "ladder/rating/snap:c00b622db4e48ab8": 467.6, "ladder/rating_se/snap:c00b622db4e48ab8": 213.2,
                             "ladder/transitivity_residual": 0.1, "strength/score/scripted:random_legal": 0.5,
                             "resume/battles_restored": 4})]
    assert _compare(straight, resumed, first=2) == []


def test_the_pool_the_digest_and_the_update_are_compared():
    for key, other in (("ladder/pool_size", 2), ("run/state_digest", "abd"), ("ppo/kl", 0.011)):
        problems = _compare([BASE], [dict(BASE, **{key: other})], first=2)
        assert problems == [f"iteration 2: 1 field(s) differ: {key} {BASE[key]!r} != {other!r}"]


def test_an_iteration_missing_from_the_resumed_run_and_iterations_before_the_split():
    assert _compare([dict(BASE, **{"run/iteration": 1, "ppo/kl": 9.0}), BASE], [BASE], first=2) == []
    assert _compare([BASE, dict(BASE, **{"run/iteration": 3})], [BASE], first=2) == [
        "iteration 3: missing from the resumed run"]
