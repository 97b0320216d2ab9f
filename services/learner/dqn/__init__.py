"""The DQN learner's own parts (docs/design.md, "A second learner: DQN").

* ``windows``: n-step windows over each seat's own decisions (seed 000's tail rules).
* ``replay``: prioritized replay of packed rows, with its memory budget and checkpoint state.
* ``targets``: masked argmax, the Double DQN target, the ensemble TD loss with bootstrap masks.
* ``network``: K Q heads (optionally dueling) over a shared trunk, and the target network.
* ``behaviour``: epsilon-greedy over the legal set on a schedule, Thompson head draws.

Everything here is pure (arrays in, arrays out) and tested by hand-worked cases
(tests/test_dqn.py).
"""
