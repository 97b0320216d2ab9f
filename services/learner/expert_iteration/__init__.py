"""Expert iteration (``learner.algorithm = "expert_iteration"``; docs/expert-iteration.md): the
rollouts search with the prior of the current generation, the learner distils the search into
the next generation from a replay of the recent generations' searched rows, and the ladder's
gate promotes a generation only when it beats the last one unsearched."""
