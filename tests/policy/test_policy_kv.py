"""The decode loop's keys/values and attention (metaagent/policy/kv.py): the store holds exactly what appending
would hold and writes in place, its attention equals transformers' sdpa (repeat_kv) attention, forwards outside
the decode loop are transformers' own, and the hf backend generates what transformers' own generate does,
sliding-window models included."""

from __future__ import annotations

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from metaagent.policy import ChatRequest, SamplingParams
from metaagent.policy.hf import HFPolicy
from metaagent.policy.kv import DECODE_ATTENTION, DecodeAttentionError, KVStore, decode_attention
from metaagent.policy.models import load_model_and_tokenizer


def _module(groups: int, layer: int = 0) -> torch.nn.Module:
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal, module.layer_idx = groups, True, layer
    return module


def _append(store: KVStore, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor):
    """One forward of ``k.shape[2]`` new columns through layer 0; returns the attention output."""
    n, kv_heads, q, d = k.shape
    query = torch.randn(n, kv_heads * 2, q, d)
    with store.forward(valid, pos):
        out, _ = decode_attention(_module(2), query, k, v, None, scaling=0.5)
    return out


def test_store_holds_what_concatenation_holds_and_writes_in_place():
    gen = torch.Generator().manual_seed(0)
    store = KVStore()
    rows = 3
    ref_k, ref_v = torch.randn(rows, 2, 5, 4, generator=gen), torch.randn(rows, 2, 5, 4, generator=gen)
    _append(store, ref_k, ref_v, torch.ones(rows, 5, dtype=torch.bool), torch.arange(5).expand(rows, 5))
    store.valid[1:, 0] = False  # column 0 is padding of rows 1 and 2: trimmed once row 0 leaves
    moves, previous = 0, None
    for step in range(150):  # crosses several buffer growths
        k, v = torch.randn(rows, 2, 1, 4, generator=gen), torch.randn(rows, 2, 1, 4, generator=gen)
        _append(store, k, v, torch.ones(rows, 1, dtype=torch.bool), torch.full((rows, 1), 5 + step))
        ref_k, ref_v = torch.cat([ref_k, k], dim=2), torch.cat([ref_v, v], dim=2)
        keys, values = store.layer(0)
        assert torch.equal(keys, ref_k) and torch.equal(values, ref_v), step
        if previous is not None and keys.untyped_storage().data_ptr() != previous.untyped_storage().data_ptr():
            moves += 1  # a new storage while the previous one is still alive: the store was copied
        previous = keys
        if step == 60:  # what the decode loop does when a row finishes: drop it, trim all-padding columns
            store.select(torch.tensor([1, 2]))
            ref_k, ref_v = ref_k[[1, 2], :, 1:], ref_v[[1, 2], :, 1:]
            rows = 2
    assert store.length == 5 + 150 - 1 and store.rows == 2
    assert moves < 10  # one buffer per growth (and one after the row drop), not one copy per step


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("q_len", [1, 7])
def test_attention_equals_repeat_kv_sdpa_under_a_padding_mask(q_len, dtype):
    gen = torch.Generator().manual_seed(1)
    n, s, old = 4, 40, 40 - q_len
    query = torch.randn(n, 6, q_len, 8, generator=gen).to(dtype)
    key, value = torch.randn(n, 2, s, 8, generator=gen).to(dtype), torch.randn(n, 2, s, 8, generator=gen).to(dtype)
    valid = torch.ones(n, s, dtype=torch.bool)
    valid[1, :9] = False  # a left-padded row
    store = KVStore()
    store.preload([(key[:, :, :old], value[:, :, :old])], valid[:, :old], torch.arange(old).expand(n, old))
    with torch.inference_mode(), store.forward(valid[:, old:], torch.arange(old, s).expand(n, q_len)):
        got, _ = decode_attention(_module(3), query, key[:, :, old:], value[:, :, old:], None, scaling=0.35)
    mask = torch.ones(n, 1, q_len, s, dtype=torch.bool).tril(diagonal=s - q_len) & valid[:, None, None, :]
    want, _ = sdpa_attention_forward(_module(3), query, key, value, mask, scaling=0.35)
    assert got.shape == want.shape == (n, q_len, 6, 8)
    rows = [0, 2, 3] if q_len > 1 else list(range(n))  # row 1's padding queries are garbage on both sides
    tol = 1e-6 if dtype == torch.float32 else 2e-2  # bf16: one rounding of scores and weights (2^-8 relative)
    assert (got[rows].float() - want[rows].float()).abs().max().item() <= tol
    if q_len > 1:
        assert (got[1, 9 - old :].float() - want[1, 9 - old :].float()).abs().max().item() <= tol


def test_forwards_outside_the_decode_loop_are_transformers_sdpa():
    module = _module(2)
    query = torch.randn(1, 4, 3, 8, requires_grad=True)
    key, value = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    got, _ = decode_attention(module, query, key, value, None)
    want, _ = sdpa_attention_forward(module, query, key, value, None)
    assert got.requires_grad and torch.equal(got, want)


def test_attention_terms_the_loop_does_not_implement_are_refused():
    store = KVStore()
    with store.forward(torch.ones(1, 1, dtype=torch.bool), torch.zeros(1, 1, dtype=torch.long)):
        with pytest.raises(DecodeAttentionError, match="softcap"):
            decode_attention(_module(1), *(torch.randn(1, 1, 1, 4) for _ in range(3)), None, softcap=30.0)


def _requests(n: int = 4, max_tokens: int = 24) -> list[ChatRequest]:
    return [
        ChatRequest(
            [{"role": "user", "content": "count to " + "ten " * (1 + 3 * i)}],
            SamplingParams(max_tokens=max_tokens, temperature=0.0),
        )
        for i in range(n)
    ]


def test_hf_backend_generates_what_transformers_generate_does():
    """Greedy decoding, batched and left-padded in the decode loop, against transformers' own generate with its
    own cache and sdpa attention, one prompt at a time (no padding)."""
    reference, tokenizer = load_model_and_tokenizer("tiny")
    model, _ = load_model_and_tokenizer("tiny")
    policy = HFPolicy(model, tokenizer, prefix_cache_mb=0)
    assert model.config._attn_implementation == DECODE_ATTENTION
    assert reference.config._attn_implementation == "sdpa"
    for c in policy.generate(_requests()):
        ids = torch.tensor([c.prompt_ids])
        out = reference.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=len(c.response_ids),
            pad_token_id=tokenizer.pad_token_id, eos_token_id=None,
        )  # fmt: skip
        assert out[0, ids.shape[1] :].tolist() == c.response_ids
        assert len(c.response_ids) == 24  # the rows really decoded


def test_sliding_window_layers_attend_only_within_the_window(forward_logprobs):
    """A Mistral-style model whose window (6) is far shorter than its prompts: the decode loop's log-probs equal
    one full forward under transformers' sdpa sliding-window mask, and differ from the same model unwindowed."""
    from transformers import MistralConfig, MistralForCausalLM

    _, tokenizer = load_model_and_tokenizer("tiny")
    config = MistralConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, sliding_window=6, max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id, attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    model = MistralForCausalLM(config).eval()
    policy = HFPolicy(model, tokenizer, prefix_cache_mb=0, continuous=True, max_batch_size=3)
    requests = [
        ChatRequest(r.messages, SamplingParams(max_tokens=12, temperature=1.0, seed=i))
        for i, r in enumerate(_requests(4, 12))
    ]
    completions = policy.generate(requests)  # 4 rows through a batch of 3: one joins as another leaves
    for c in completions:
        ref = forward_logprobs(policy, c, 1.0)  # the same model outside the decode loop: transformers' sdpa
        assert max(abs(a - b) for a, b in zip(c.logprobs, ref.tolist())) < 1e-4
    model.config.sliding_window = None
    unwindowed = forward_logprobs(policy, completions[-1], 1.0)
    assert max(abs(a - b) for a, b in zip(completions[-1].logprobs, unwindowed.tolist())) > 1e-3
