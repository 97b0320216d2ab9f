"""The PPO learner (``learner.algorithm = "ppo"``, the default): GAE over the value pass, then
clipped PPO with a dual clip and two entropy bonuses (docs/learning.md).

* ``update``: one PPO update over one iteration's trainable cells (``ppo_update``, CleanRL's
  shape; the optimisers it steps, ``make_optimizers``);
* ``learner``: ``PpoAlgorithm``, the ``algorithm.Algorithm`` the learner service runs: the value
  pass and GAE, the batch, the extensions' hooks and the LR backoff around ``ppo_update``, and
  the ``ppo/`` keys of the metric row.

The update's names are importable from here, as they were when it was ``services/learner/ppo.py``.
"""

from services.learner.ppo.update import (  # noqa: F401 - the update's public names, from the package
    ADV_EPS, UpdateData, _check_data, adam_eps_floor_frac, clipped_objective, explained_variance, make_optimizers,
    ppo_update, standardize_advantages, value_error,
)
