"""TreeStrap (``learner.algorithm = "treestrap"``; docs/treestrap.md): expert iteration's searched
rollouts, generations and replay, with the searched targets learnt by an ensemble of K score heads
over the actor's trunk, each on its own bootstrap sample of the rows (seed 000's
``TreeStrapBatch``), and the actor's policy head (the proposal the rollouts search from) trained
toward the Thompson choice of the ensemble among each decision's searched candidates."""
