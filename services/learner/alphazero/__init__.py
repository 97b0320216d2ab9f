"""The AlphaZero learner (``learner.algorithm = "alphazero"``): search targets from the rollouts'
lookahead (``shared.search.targets``), cross-entropy of the policy on them over the legal set,
the critic on realized returns (docs/learning.md, "An AlphaZero learner")."""
