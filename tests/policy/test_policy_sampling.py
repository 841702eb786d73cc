"""sample_next: the sampling distribution, truncation, seeds and the reported log-probs."""

from __future__ import annotations

import pytest
import torch

from metaagent.policy import SamplingParams
from metaagent.policy.hf import sample_next

LOGITS = torch.tensor([2.0, 1.0, 0.0, -1.0])  # softmax: 0.644, 0.237, 0.087, 0.032


def _draw(params: SamplingParams, n: int = 4000) -> torch.Tensor:
    logits = LOGITS.repeat(n, 1)  # (n, V)
    gens = [torch.Generator().manual_seed(s) for s in range(n)]
    tokens, _ = sample_next(logits, [params] * n, gens)
    return torch.bincount(tokens, minlength=4).float() / n


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_frequencies_follow_softmax_of_scaled_logits(temperature):
    freq = _draw(SamplingParams(temperature=temperature))
    expected = torch.softmax(LOGITS / temperature, dim=0)
    assert torch.allclose(freq, expected, atol=0.03), (freq, expected)


def test_top_k_and_top_p_restrict_the_support_and_renormalise():
    freq = _draw(SamplingParams(top_k=2))
    p = torch.softmax(LOGITS, 0)
    assert freq[2:].sum() == 0 and torch.allclose(freq[:2], p[:2] / p[:2].sum(), atol=0.03)
    freq = _draw(SamplingParams(top_p=0.85))  # 0.644 + 0.237 = 0.881 >= 0.85: two tokens
    assert freq[2:].sum() == 0 and freq[1] > 0.2


def test_logprobs_are_of_the_scaled_untruncated_distribution():
    params = [
        SamplingParams(temperature=0.5, top_k=1),
        SamplingParams(temperature=0),
        SamplingParams(temperature=2.0),
    ]
    gens = [torch.Generator().manual_seed(0) for _ in params]
    tokens, logprobs = sample_next(LOGITS.repeat(3, 1), params, gens)
    assert tokens[0] == 0 and tokens[1] == 0  # top_k=1 and greedy both take the argmax
    assert logprobs[0].item() == pytest.approx(torch.log_softmax(LOGITS / 0.5, 0)[0].item(), abs=1e-6)
    assert logprobs[1].item() == pytest.approx(torch.log_softmax(LOGITS, 0)[0].item(), abs=1e-6)
    assert logprobs[2].item() == pytest.approx(torch.log_softmax(LOGITS / 2.0, 0)[tokens[2]].item(), abs=1e-6)


def test_a_row_depends_only_on_its_own_seed_and_logits():
    params = SamplingParams()
    big = torch.randn(5, 1000, generator=torch.Generator().manual_seed(1))
    alone, _ = sample_next(big[2:3], [params], [torch.Generator().manual_seed(42)])
    gens = [torch.Generator().manual_seed(s) for s in (7, 8, 42, 9, 10)]
    together, _ = sample_next(big, [params] * 5, gens)
    assert together[2] == alone[0]
    noisy, _ = sample_next(
        big[2:3] + 1e-6 * torch.randn(1, 1000), [params], [torch.Generator().manual_seed(42)]
    )
    assert noisy[0] == alone[0]  # float noise of another batch layout does not move the pick


def test_the_race_draws_the_stream_of_exponential_():
    """q = -log1p(-u) from fp64 uniforms is Tensor.exponential_'s stream: the picks equal the race run on
    exponential_ draws of the same seeds, for all rows of a real-sized vocabulary."""
    logits = torch.randn(6, 49152, generator=torch.Generator().manual_seed(3))
    params = [SamplingParams(temperature=t) for t in (1.0, 0.7, 1.3, 1.0, 0.5, 2.0)]
    tokens, _ = sample_next(logits, params, [torch.Generator().manual_seed(s) for s in range(6)])
    for i, p in enumerate(params):
        race = torch.empty(49152).exponential_(generator=torch.Generator().manual_seed(i))
        probs = torch.softmax(logits[i] / p.temperature, 0)
        assert tokens[i] == (probs / race).argmax(), i


def _sample_next_before(logits, params, generators):
    """sample_next as it was before one logsumexp served both uses (two logsumexps, out-of-place race)."""
    from metaagent.policy.hf import _truncate
    from metaagent.policy.logsoftmax import log_softmax, token_logprobs

    temps = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params], dtype=logits.dtype)
    z = logits / temps[:, None]
    tokens = logits.argmax(dim=-1)
    sampled = [i for i, p in enumerate(params) if p.temperature > 0]
    if sampled:
        rows = torch.tensor(sampled)
        probs = log_softmax(z[rows]).exp()
        for k, i in enumerate(sampled):
            if params[i].top_k > 0 or params[i].top_p < 1.0:
                probs[k] = _truncate(probs[k], params[i].top_k, params[i].top_p)
        u = torch.empty(probs.shape, dtype=torch.float64)
        for k, i in enumerate(sampled):
            u[k].uniform_(generator=generators[i])
        race = torch.log1p(u.neg_()).neg_().to(probs.dtype)
        tokens[rows] = (probs / race).argmax(dim=-1)
    logprobs, _ = token_logprobs(z, tokens)
    return tokens, logprobs


@pytest.mark.parametrize(
    "params",
    [
        [SamplingParams(temperature=1.0)] * 8,  # every row sampled: the decode loop's usual step
        [SamplingParams(temperature=t, top_k=k, top_p=p) for t, k, p in
         [(1.0, 0, 1.0), (0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.9), (0, 0, 1.0), (1.0, 0, 1.0)]],  # fmt: skip
        [SamplingParams(temperature=0)] * 3,  # greedy only
    ],
)
def test_the_decode_step_sampler_is_bit_identical_to_its_two_pass_form(params):
    """The same tokens and log-prob bits as the earlier form on the same streams (49,152-token rows)."""
    logits = torch.randn(len(params), 49152, generator=torch.Generator().manual_seed(3)) * 4
    streams = lambda: [torch.Generator().manual_seed(10 + i) for i in range(len(params))]  # noqa: E731
    got = sample_next(logits, params, streams())
    want = _sample_next_before(logits, params, streams())
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
