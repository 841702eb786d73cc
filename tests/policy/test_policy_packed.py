"""Prepacked bf16 linear weights (metaagent.policy.packed): same products, never stale, only while generating."""

from __future__ import annotations

import pytest
import torch

from metaagent.policy import ChatRequest, SamplingParams, packed
from metaagent.policy.hf import HFPolicy
from metaagent.policy.models import load_model_and_tokenizer

pytestmark = pytest.mark.skipif(not packed.supported(), reason="this torch build has no oneDNN bf16 prepacking")


def _linear(bias: bool = False) -> torch.nn.Linear:
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 96, bias=bias).to(torch.bfloat16)
    assert packed.install(layer) == 1
    return layer


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 64), (8, 64), (2, 5, 64), (3, 1, 64)])
def test_the_packed_product_is_the_linear_product(shape, bias):
    layer = _linear(bias)
    x = torch.randn(shape, dtype=torch.bfloat16)
    want = torch.nn.functional.linear(x, layer.weight, layer.bias)
    with torch.no_grad(), packed.packing():
        got = layer(x)
    assert packed.CACHE in vars(layer)  # it did go through the packed weight
    assert got.shape == want.shape and got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)  # bf16: summation order may differ


def test_a_changed_weight_is_packed_again():
    layer = _linear()
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    with torch.no_grad(), packed.packing():
        before = layer(x)
        layer.weight.mul_(-1)  # in place, as an optimizer step or a DecodeCopy refresh writes it
        after = layer(x)
        layer.weight.data = torch.zeros_like(layer.weight)  # a new storage
        zero = layer(x)
    torch.testing.assert_close(after.float(), -before.float(), rtol=1e-2, atol=1e-2)
    assert torch.count_nonzero(zero) == 0


def test_outside_generation_and_with_autograd_the_plain_linear_runs():
    layer = _linear()
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        layer(x)  # not inside packing()
    assert packed.CACHE not in vars(layer)
    with packed.packing():
        out = layer(x)  # grad mode: the packed op has no backward
    assert packed.CACHE not in vars(layer)
    out.float().sum().backward()
    assert layer.weight.grad is not None and torch.count_nonzero(layer.weight.grad) > 0


def test_only_bf16_cpu_linears_are_installed_and_drop_frees_the_packs():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8).to(torch.bfloat16))
    assert packed.install(model) == 1 and "forward" not in vars(model[0])
    with torch.no_grad(), packed.packing():
        model[1](torch.randn(2, 8, dtype=torch.bfloat16))
    assert packed.CACHE in vars(model[1])
    packed.drop(model)
    assert packed.CACHE not in vars(model[1])


def _requests() -> list[ChatRequest]:
    return [
        ChatRequest([{"role": "user", "content": "say " + "a " * i}], SamplingParams(max_tokens=12, seed=i))
        for i in range(4)
    ]


def _plain_logprobs(policy: HFPolicy, completion) -> torch.Tensor:
    """Log-probs of a completion's own tokens from one plain forward of the generation model (torch's linear,
    current weights, temperature 1): a score that does not depend on which tokens a CPU happens to sample."""
    from metaagent.policy.logsoftmax import log_softmax

    ids = torch.tensor([completion.prompt_ids + completion.response_ids])
    with torch.inference_mode():
        logits = policy.decoder(ids).logits[0].float()  # outside packing(): nn.Linear's own path
    n = len(completion.prompt_ids)
    return log_softmax(logits)[n - 1 : -1].gather(1, torch.tensor(completion.response_ids)[:, None]).squeeze(1)


def test_generation_with_packed_weights_scores_like_the_plain_path_and_follows_weight_changes():
    """A bf16 policy over fp32 master weights (the training rollout): each generated token's log-prob equals the
    plain path's score of the same tokens, before and after the master moves and after free_memory. Measured on
    the tiny model: at most 6e-3 apart (bf16 prefill vs incremental decode); 0.23-0.58 with packs that do not
    follow the weights."""
    model, tokenizer = load_model_and_tokenizer("tiny")
    policy = HFPolicy(model, tokenizer, dtype="bfloat16", prefix_cache_mb=0)
    linears = [m for m in policy.decoder.modules() if type(m) is torch.nn.Linear]
    assert linears and all("forward" in vars(m) for m in linears)
    for step in range(3):
        got = policy.generate(_requests())
        assert all(packed.CACHE in vars(m) for m in linears)
        for c in got:
            torch.testing.assert_close(torch.tensor(c.logprobs), _plain_logprobs(policy, c), rtol=0, atol=0.05)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.25)  # an update: the next generation must use the new weights, not stale packs
        if step == 1:
            policy.free_memory()  # the trainer's call before an update drops the packs with the copy
            assert not any(packed.CACHE in vars(m) for m in linears)


def test_prepack_false_keeps_torchs_linear():
    policy = HFPolicy("tiny", dtype="bfloat16", prefix_cache_mb=0, prepack=False)
    assert not any("forward" in vars(m) for m in policy.decoder.modules() if type(m) is torch.nn.Linear)
    policy.generate(_requests()[:1])
    assert not any(packed.CACHE in vars(m) for m in policy.decoder.modules())
