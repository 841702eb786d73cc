"""The project's one log-softmax: ``log p_v = z_v - logsumexp(z)``, accurate in fp32 on every device.

Every token log-prob goes through here: the rollout's pi_old (:func:`metaagent.policy.hf.sample_next`), the
trainer's pi_theta (:mod:`metaagent.learn.logprobs`) and the tests' references. verl's actor computes its fp32
log-probs the same way (``verl.utils.torch_functional.logprobs_from_logits_v2``: ``gather - logsumexp``).

Why not ``torch.log_softmax`` (or ``softmax`` / ``cross_entropy``): on CPU (torch 2.13) their fused kernel adds
up ``exp(z - max)`` in a few per-lane fp32 accumulators, one after another. The lane that holds the top token
(``exp(0) = 1``) then absorbs thousands of tail terms, each rounded to a multiple of ulp(1) = 1.2e-7. On a sharp
distribution over a 49k vocabulary the rounding is biased, so the error adds up:

- one logit at 0 and 49,151 at -15: error 1.6e-4;
- the warm-started tiny model (mean entropy 0.45 nats): error 4.2e-5;
- ``torch.logsumexp`` on the same inputs (cascade summation): error 1.2e-6 against fp64.

Through the rollout, that error put pi_old 1.2e-4 away from verl's actor and made the first PPO-KL 2-3e-5
instead of 0. CUDA's kernels reduce in blocks and do not show it.
"""

from __future__ import annotations

import torch


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """``logits - logsumexp(logits)`` over the last dim; shape (..., V) -> (..., V), dtype of ``logits``."""
    return logits - torch.logsumexp(logits, dim=-1, keepdim=True)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p[token], logsumexp)`` of each row without building the (N, V) log-probs.

    Args:
        logits: (N, V) scores (already divided by the temperature).
        tokens: (N,) token ids.

    Returns:
        ``(logp (N,), logz (N,))``.
    """
    logz = torch.logsumexp(logits, dim=-1)  # (N,)
    return logits.gather(-1, tokens[:, None]).squeeze(-1) - logz, logz
