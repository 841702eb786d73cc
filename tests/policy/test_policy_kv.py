"""Decode-time attention plumbing (metaagent/policy/kv.py): the in-place KV cache layer holds exactly what
transformers' concatenating layer holds, grouped-query attention without repeat_kv gives the same outputs,
and the hf backend generates the same tokens and log-probs with them as with transformers' own path."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from metaagent.policy import ChatRequest, SamplingParams
from metaagent.policy import hf as hf_module
from metaagent.policy.hf import HFPolicy
from metaagent.policy.kv import GQA_SDPA, GrowingLayer, gqa_sdpa_attention
from metaagent.policy.models import load_model_and_tokenizer


def _kv(n: int, cols: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 2, cols, 4, generator=gen), torch.randn(n, 2, cols, 4, generator=gen)


def test_growing_layer_holds_what_concatenation_holds_and_writes_in_place():
    gen = torch.Generator().manual_seed(0)
    mine, ref = GrowingLayer(), DynamicLayer()
    for k, v in [_kv(3, 5, gen)]:
        mine.update(k, v), ref.update(k, v)
    moves, rows, previous = 0, 3, None
    for step in range(150):  # crosses several buffer growths
        k, v = _kv(rows, 1, gen)
        keys, values = mine.update(k, v)
        rk, rv = ref.update(k, v)
        assert torch.equal(keys, rk) and torch.equal(values, rv), step
        if previous is not None and keys.untyped_storage().data_ptr() != previous.untyped_storage().data_ptr():
            moves += 1  # a new storage while the previous one is still alive: the cache was copied
        previous = keys
        if step == 60:  # what the decode loop does to a layer: drop a row, trim a padding column
            for layer in (mine, ref):
                layer.batch_select_indices(torch.tensor([0, 2]))
                layer.keys, layer.values = layer.keys[..., 1:, :], layer.values[..., 1:, :]
            rows = 2
    assert mine.get_seq_length() == ref.get_seq_length() == 5 + 150 - 1
    assert moves < 10  # one buffer per growth (and one after the row drop), not one copy per step


@pytest.mark.parametrize("q_len", [1, 7])
def test_gqa_attention_equals_repeat_kv_attention_under_a_padding_mask(q_len):
    gen = torch.Generator().manual_seed(1)
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 3, True
    n, s = 4, 40
    query = torch.randn(n, 6, q_len, 8, generator=gen)
    key, value = torch.randn(n, 2, s, 8, generator=gen), torch.randn(n, 2, s, 8, generator=gen)
    mask = torch.ones(n, 1, q_len, s, dtype=torch.bool).tril(diagonal=s - q_len)
    mask[1, ..., :9] = False  # a left-padded row
    with torch.inference_mode():
        got, _ = gqa_sdpa_attention(module, query, key, value, mask, scaling=0.35)
        want, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.35)
    assert got.shape == want.shape == (n, q_len, 6, 8)
    assert (got - want).abs().max().item() <= 1e-6


def test_gqa_attention_leaves_training_to_transformers():
    module = torch.nn.Module()
    module.num_key_value_groups = 2
    query = torch.randn(1, 4, 3, 8, requires_grad=True)
    key, value = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    got, _ = gqa_sdpa_attention(module, query, key, value, None)
    want, _ = sdpa_attention_forward(module, query, key, value, None)
    assert got.requires_grad and torch.equal(got, want)


def test_hf_backend_generates_the_same_with_transformers_own_attention_and_cache(monkeypatch):
    model, tokenizer = load_model_and_tokenizer("tiny")  # a fresh copy: this test switches its attention
    assert model.config._attn_implementation == "sdpa"
    requests = [
        ChatRequest(
            [{"role": "user", "content": "count to " + "ten " * (1 + 3 * i)}],
            SamplingParams(max_tokens=24, seed=7 + i, temperature=(1.0, 0.7)[i % 2]),
        )
        for i in range(4)
    ]
    fast = HFPolicy(model, tokenizer, prefix_cache_mb=0)
    assert model.config._attn_implementation == GQA_SDPA
    got = fast.generate(requests)

    model.set_attn_implementation("sdpa")
    monkeypatch.setattr(hf_module, "_new_cache", lambda m: DynamicCache(config=m.config))
    plain = HFPolicy.__new__(HFPolicy)
    plain.__dict__.update(fast.__dict__)
    want = plain.generate(requests)
    assert model.config._attn_implementation == "sdpa"
    for a, b in zip(got, want):
        assert a.response_ids == b.response_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) <= 1e-5
    assert sum(len(c.response_ids) for c in got) > 4 * 5  # the rows really decoded


def test_hf_backend_cache_layers_are_written_in_place():
    model, tokenizer = load_model_and_tokenizer("tiny")
    policy = HFPolicy(model, tokenizer, prefix_cache_mb=0)
    cache = hf_module._new_cache(policy.model)
    assert all(type(layer) is GrowingLayer for layer in cache.layers)
    assert hf_module._plain_dynamic(cache)
