"""Decode product forms per CPU kind (metaagent.policy.packed.DECODE_FORMS): the fp32 ``W @ h.T`` LM head
gives the plain path's products within a stated tolerance, only while generating; the table picks as
measured."""

from __future__ import annotations

import pytest
import torch

from metaagent.policy import ChatRequest, SamplingParams, packed
from metaagent.policy.hf import HFPolicy
from metaagent.policy.models import load_model_and_tokenizer

#: |W @ h.T - F.linear| / max |F.linear|: fp32 sums of 576 products in another order (measured: <= 5e-7)
W_HT_RTOL = 1e-5


def _linear(bias: bool) -> torch.nn.Linear:
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 96, bias=bias)
    vars(layer)[packed.FORM] = "w_ht"
    layer.forward = packed._forward.__get__(layer)
    return layer


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 64), (8, 64), (2, 5, 64), (3, 1, 64), (32, 64)])
def test_w_ht_is_the_linear_product_within_tolerance(shape, bias):
    layer = _linear(bias)
    x = torch.randn(shape)
    want = torch.nn.functional.linear(x, layer.weight, layer.bias)
    with torch.no_grad(), packed.packing():
        got = layer(x)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert (got - want).abs().max() <= W_HT_RTOL * want.abs().max()


def test_w_ht_only_while_generating_and_without_autograd():
    layer = _linear(bias=True)
    x = torch.randn(4, 64)
    calls = []
    real = torch.Tensor.__matmul__
    with packed.packing():
        out = layer(x)  # grad mode: nn.Linear's own path, which has a backward
    out.sum().backward()
    assert layer.weight.grad is not None and torch.count_nonzero(layer.weight.grad) > 0
    try:
        torch.Tensor.__matmul__ = lambda a, b: calls.append(1) or real(a, b)
        with torch.no_grad():
            layer(x)  # outside packing(): F.linear
        assert not calls
        with torch.no_grad(), packed.packing():
            layer(x)
        assert calls  # inside: the W @ h.T form
    finally:
        torch.Tensor.__matmul__ = real


def test_the_table_picks_forms_per_kind_and_dtype():
    assert packed.decode_form("avx512_bf16", "float32", "lm_head") == "w_ht"
    assert packed.decode_form("avx512_bf16", "float32", "other") == "linear"
    assert packed.decode_form("AVX2", "float32", "lm_head") == "w_ht"
    assert packed.decode_form("AVX2", "float32", "other") == "w_ht"  # measured faster at 32 rows there
    assert packed.decode_form("other", "float32", "lm_head") == "linear"  # nothing measured: torch's linear
    assert packed.decode_form("other", "float16", "other") == "linear"
    want = "packed" if packed.supported() else "linear"
    assert packed.decode_form("AMX", "bfloat16", "other") == want  # unmeasured bf16: packed where oneDNN can
    for kinds in packed.DECODE_FORMS.values():
        for layers in kinds.values():
            assert set(layers) <= {"lm_head", "other"} and set(layers.values()) <= set(packed.FORMS)


def test_install_gives_the_fp32_lm_head_its_form_on_a_kind_that_measured_it():
    model, _ = load_model_and_tokenizer("tiny")
    assert packed.install(model, kind="avx512_bf16") == 1
    head = model.get_output_embeddings()
    assert vars(head)[packed.FORM] == "w_ht" and "forward" in vars(head)
    others = [m for m in model.modules() if type(m) is torch.nn.Linear and m is not head]
    assert others and not any("forward" in vars(m) for m in others)
    assert packed.install(model, kind="other") == 0  # nothing measured there: nothing new installed


def test_install_gives_every_fp32_linear_the_w_ht_form_on_avx2():
    model, _ = load_model_and_tokenizer("tiny")
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    assert packed.install(model, kind="AVX2") == len(linears) > 1
    assert all(vars(m)[packed.FORM] == "w_ht" for m in linears)


def _requests() -> list[ChatRequest]:
    return [
        ChatRequest([{"role": "user", "content": "say " + "a " * i}], SamplingParams(max_tokens=10, seed=i))
        for i in range(4)
    ]


def _plain_logprobs(policy: HFPolicy, completion) -> torch.Tensor:
    """Log-probs of a completion's own tokens from one plain forward (outside packing(): torch's linear):
    a score that does not depend on which tokens a CPU happens to sample."""
    from metaagent.policy.logsoftmax import log_softmax

    ids = torch.tensor([completion.prompt_ids + completion.response_ids])
    with torch.inference_mode():
        logits = policy.decoder(ids).logits[0].float()
    n = len(completion.prompt_ids)
    picked = torch.tensor(completion.response_ids)[:, None]
    return log_softmax(logits)[n - 1 : -1].gather(1, picked).squeeze(1)


def test_fp32_generation_with_the_w_ht_head_scores_like_the_plain_path(monkeypatch):
    """Each token's log-prob from the W @ h.T LM head equals the plain path's score of the same tokens
    (fp32: incremental decode vs one prefill differ by ~1e-6; a head that was not the LM head's product
    would be far)."""
    monkeypatch.setattr("metaagent.policy.precision.cpu_kind", lambda: "AVX2")
    model, tokenizer = load_model_and_tokenizer("tiny")
    policy = HFPolicy(model, tokenizer, prefix_cache_mb=0)
    head = model.get_output_embeddings()
    assert vars(head).get(packed.FORM) == "w_ht"
    for c in policy.generate(_requests()):
        torch.testing.assert_close(torch.tensor(c.logprobs), _plain_logprobs(policy, c), rtol=0, atol=1e-4)


def test_prepack_false_keeps_torchs_linear_in_fp32_too(monkeypatch):
    monkeypatch.setattr("metaagent.policy.precision.cpu_kind", lambda: "AVX2")
    policy = HFPolicy("tiny", prefix_cache_mb=0, prepack=False)
    assert not any("forward" in vars(m) for m in policy.decoder.modules() if type(m) is torch.nn.Linear)
