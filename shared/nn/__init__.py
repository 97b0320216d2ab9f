"""The torch half of shared/: the policy network, its masked distribution, row-to-tensor
inference and safetensors state files. Used by the learner and the evaluator; never by the
rollout, whose image has no torch (tests/services/rollout/test_no_torch.py keeps every other shared module
torch-free). This __init__ imports nothing so that listing the package stays torch-free too."""
