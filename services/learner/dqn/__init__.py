"""The DQN learner's own parts (docs/design.md, "A second learner: DQN").

* ``windows``: n-step windows over each seat's own decisions (seed 000's tail rules), fed
  from a rectangle across iterations.
* ``replay``: prioritized replay of packed rows, with its memory budget and checkpoint state.
* ``targets``: masked argmax, the Double DQN target, the ensemble TD loss with bootstrap masks.
* ``network``: the dueling combination over the legal set, a small K-head network, the target
  network's copy.
* ``pointer_q``: the service's K-head (optionally dueling) Q network over the actor's
  architecture, and ``played_actor``: the heads' mean written into the actor snapshots play.
* ``behaviour``: epsilon-greedy over the legal set on a schedule, Thompson head draws per
  (seat, episode) from central inference's episode keys,
  ``DqnBehaviour`` behind central inference's ``act``.
* ``update``: one update over replay minibatches (as ``DqnBatch``) and the ``dqn/`` row keys.
* ``state_files``: the replay and the open windows as checkpoint files (no pickle).

Everything here is pure (arrays in, arrays out) and tested by hand-worked cases
(tests/services/learner/dqn/test_dqn.py).
"""
