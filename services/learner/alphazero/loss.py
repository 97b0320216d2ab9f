"""The AlphaZero losses over an ``shared.batches.AzMinibatch`` (Silver et al. 2017/2018;
Danihelka et al. 2022, "Policy improvement by planning with Gumbel", for the completed-Q
target the rollouts' search produces).

Per row i of a minibatch of m rows (w_i = ``policy_weights``, pi_i the search target over the
row's legal set L_i, z_i the realized return-to-go):

    policy_i = -w_i * sum_{a in L_i} pi_i(a) log softmax_L(logits_i)(a)
    value_i  = (V(s_i) - z_i)^2

Illegal logits are set to ``torch.finfo(dtype).min`` before the softmax (seed 000: a fixed
-1e9 overflows float16). The log-probabilities of illegal actions are then ~finfo.min - lse,
which is -inf in the dtype, and 0 * -inf is NaN: the product is therefore taken over the legal
set only (illegal entries are zeroed before the multiply), so a value-only row (empty legal
set, weight 0) contributes exactly 0 to the loss and to the gradient.
"""

from __future__ import annotations

import torch


def masked_logits(logits: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """``logits`` (m, A) float with every entry where ``legal`` (m, A) bool is False set to
    ``torch.finfo(logits.dtype).min``."""
    return logits.masked_fill(~legal, torch.finfo(logits.dtype).min)


def policy_cross_entropy(logits: torch.Tensor, legal: torch.Tensor, targets: torch.Tensor,
                         weights: torch.Tensor) -> torch.Tensor:
    """(m,) per-row weighted cross-entropy -w_i sum_{a legal} pi_i(a) log p_i(a), p the softmax
    of ``masked_logits``. ``targets`` (m, A) (0 off the legal set), ``weights`` (m,). A row with
    no legal action gives 0 (its weight must be 0: ``AlphaZeroBatch`` refuses anything else)."""
    logp = torch.log_softmax(masked_logits(logits, legal), dim=-1)
    per_row = -(targets * logp.masked_fill(~legal, 0.0)).sum(dim=-1)
    return weights * per_row


def value_error(values: torch.Tensor, value_targets: torch.Tensor) -> torch.Tensor:
    """(m,) squared error (V - z)^2 of the critic's ``values`` (m,) against the realized returns."""
    return (values - value_targets).pow(2)


def target_entropy_and_kl(logits: torch.Tensor, legal: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row (m,): H(pi) of the search target and KL(pi || p) to the network's policy p over
    the legal set, in nats (0 for a row without legal actions). Diagnostics, no gradient."""
    with torch.no_grad():
        logp = torch.log_softmax(masked_logits(logits.float(), legal), dim=-1).masked_fill(~legal, 0.0)
        t = targets.float()
        logt = torch.where(t > 0, t.clamp_min(1e-30).log(), torch.zeros_like(t))
        entropy = -(t * logt).sum(-1)
        kl = (t * (logt - logp)).sum(-1)
    return entropy, kl
