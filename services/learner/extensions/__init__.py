"""RoyaleFleet's own learner extensions (shared/learner_extension.py): the warm start from a
clone (``warm_start``) and the KL anchor to it (``imitation``)."""
