"""The DQN learner's own parts (docs/design.md, "A second learner: DQN").

* ``windows``: n-step windows over each seat's own decisions (seed 000's tail rules), fed
  from a rectangle across iterations.
* ``replay``: prioritized replay of packed rows, with its memory budget and checkpoint state.
* ``targets``: masked argmax, the Double DQN target, the ensemble TD loss with bootstrap masks.
* ``network``: K Q heads (optionally dueling) over a shared trunk, and the target network.
* ``behaviour``: epsilon-greedy over the legal set on a schedule, Thompson head draws,
  ``DqnBehaviour`` behind central inference's ``act``.
* ``update``: one update over replay minibatches (as ``DqnBatch``) and the ``dqn/`` row keys.
* ``state_files``: the replay and the open windows as checkpoint files (no pickle).

Everything here is pure (arrays in, arrays out) and tested by hand-worked cases
(tests/services/learner/dqn/test_dqn.py).
"""
