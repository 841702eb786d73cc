"""The one log-softmax (metaagent.policy.logsoftmax): fp32-accurate on the sharp, large-vocabulary distributions
where torch's CPU log_softmax kernel is ~1e-4 off, and the rollout's pi_old goes through it."""

from __future__ import annotations

import torch

from metaagent.policy.base import SamplingParams
from metaagent.policy.hf import sample_next
from metaagent.policy.logsoftmax import log_softmax, token_logprobs

TOL = 2e-6  # fp32 against fp64


def sharp_logits(rows: int = 3, vocab: int = 49152) -> torch.Tensor:
    """One token at 0, the rest at -15: a warm-started model's peaked next-token distribution over a 49k vocab
    (torch.log_softmax in fp32 on CPU: 1.6e-4 off fp64 here, measured with torch 2.13)."""
    x = torch.full((rows, vocab), -15.0)
    x[:, 0] = 0.0
    x[1] += torch.linspace(0, 1e-3, vocab)  # rows that are not all ties
    x[2, 7] = 2.0
    return x


def test_log_softmax_is_fp32_accurate_on_a_sharp_large_vocabulary():
    x = sharp_logits()
    exact = torch.log_softmax(x.double(), -1)
    assert (log_softmax(x).double() - exact).abs().max() <= TOL
    tokens = torch.tensor([0, 5, 7])
    logp, logz = token_logprobs(x, tokens)
    assert (logp.double() - exact.gather(-1, tokens[:, None]).squeeze(-1)).abs().max() <= TOL
    assert torch.allclose(logz.double(), torch.logsumexp(x.double(), -1), atol=TOL)
    assert torch.equal(logp, log_softmax(x).gather(-1, tokens[:, None]).squeeze(-1))


def test_rollout_log_probs_are_exact_on_a_sharp_distribution():
    x = sharp_logits()
    params = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.0), SamplingParams(temperature=0.5)]
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    tokens, logprobs = sample_next(x.clone(), params, gens)
    temps = torch.tensor([1.0, 1.0, 0.5], dtype=torch.float64)[:, None]
    exact = torch.log_softmax(x.double() / temps, -1).gather(-1, tokens[:, None]).squeeze(-1)
    assert (logprobs.double() - exact).abs().max() <= TOL, (logprobs, exact)
