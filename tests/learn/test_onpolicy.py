"""The trainer's log-probs are the rollout's: on-policy ratios are 1 against the HF backend's log-probs.

Uses the policy layer's cached models (no hub access): "tiny" (random weights, real tokenizer) and the
embedded SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import pytest
import torch

from metaagent.learn.logprobs import naive_response_logprobs, response_logprobs
from metaagent.learn.losses import GlobalBatch, LossConfig, policy_loss
from metaagent.learn.samples import Sample, collate
from metaagent.policy.base import ChatRequest, SamplingParams

pytestmark = pytest.mark.slow


def rollout_samples(policy, temperatures, max_tokens=12):
    requests = [
        ChatRequest(
            [{"role": "user", "content": f"Count to {i + 3}."}],
            SamplingParams(max_tokens=max_tokens, temperature=t, seed=i),
        )
        for i, t in enumerate(temperatures)
    ]
    out = []
    for req, c in zip(requests, policy.generate(requests)):
        temp = req.sampling.temperature or 1.0
        out.append(Sample("executor", c.prompt_ids, c.response_ids, c.logprobs, 1.0, temp, agent="A"))
    return out


@pytest.mark.parametrize("alias", ["tiny", "embedded"])
def test_on_policy_ratio_is_one(alias):
    from metaagent.policy.hf import HFPolicy

    policy = HFPolicy(alias)
    samples = rollout_samples(policy, [0.7, 1.0, 1.3, 0.0])
    batch = collate(samples, pad_id=policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = response_logprobs(policy.model, batch, chunk_size=7)
    mask = batch["response_mask"]
    diff = ((logp - batch["old_log_probs"]) * mask).abs().max()
    assert float(diff) < 2e-3, f"trainer and rollout log-probs differ by {float(diff)}"
    _, m = policy_loss(
        logp,
        batch["old_log_probs"],
        batch["advantages"],
        mask,
        config=LossConfig(),
        batch=GlobalBatch(int(mask.sum()), len(samples)),
    )
    assert m["train/pg_clipfrac"] == 0.0 and abs(m["train/ppo_kl"]) < 1e-3


def test_chunked_equals_naive_on_the_embedded_model():
    """Real vocabulary (49k) and tied embeddings. In float64 the two paths agree to rounding; in fp32 they
    differ by ~1e-5 because a 49k-term log-sum-exp reduces in a different order (neither is more exact)."""
    from metaagent.policy.models import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer("embedded")
    model.double()
    gen = torch.Generator().manual_seed(0)

    def ids(n):
        return torch.randint(0, 49152, (n,), generator=gen).tolist()

    samples = [
        Sample("designer", ids(9), ids(6), [-1.0] * 6, 1.0, 0.8),
        Sample("executor", ids(4), ids(11), [-1.0] * 11, -1.0, 1.0),
    ]
    batch = collate(samples)

    def run(fn):
        model.zero_grad(set_to_none=True)
        lp, ent = fn()
        lp.sum().backward()
        return lp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    lp, ent, grads = run(lambda: response_logprobs(model, batch, chunk_size=5, with_entropy=True))
    ref_lp, ref_ent, ref_grads = run(lambda: naive_response_logprobs(model, batch, with_entropy=True))
    torch.testing.assert_close(lp, ref_lp, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(ent, ref_ent, atol=1e-10, rtol=1e-10)
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], atol=1e-9, rtol=1e-7, msg=name)
