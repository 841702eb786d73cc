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
from metaagent.policy.kv import DECODE_ATTENTION, DecodeAttentionError, KVStore, PromptKV, decode_attention
from metaagent.policy.models import load_model_and_tokenizer


def _module(groups: int, layer: int = 0) -> torch.nn.Module:
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal, module.layer_idx = groups, True, layer
    return module


def _step(store: KVStore, rows: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode forward of layer 0 with random keys/values (rows, 2, 1, 4); returns them."""
    k, v = torch.randn(rows, 2, 1, 4, generator=gen), torch.randn(rows, 2, 1, 4, generator=gen)
    with store.forward(torch.ones(rows, 1, dtype=torch.bool), store.lengths[:, None]):
        decode_attention(_module(2), torch.randn(rows, 4, 1, 4, generator=gen), k, v, None, scaling=0.5)
    return k, v


def _prompt(lengths: list[int], gen: torch.Generator) -> tuple[PromptKV, list[torch.Tensor], list[torch.Tensor]]:
    """A left-padded prefill of rows with ``lengths`` tokens through layer 0; returns it and each row's keys/values."""
    n, width = len(lengths), max(lengths)
    valid = torch.tensor([[c >= width - m for c in range(width)] for m in lengths])
    positions = (valid.long().cumsum(1) - 1).clamp(min=0)
    k, v = torch.randn(n, 2, width, 4, generator=gen), torch.randn(n, 2, width, 4, generator=gen)
    prompt = PromptKV()
    with prompt.forward(valid, positions):
        decode_attention(_module(2), torch.randn(n, 4, width, 4, generator=gen), k, v, None, scaling=0.5)
    return prompt, [k[i][:, valid[i]] for i in range(n)], [v[i][:, valid[i]] for i in range(n)]


def test_store_holds_each_rows_tokens_in_position_order_and_writes_in_place():
    """Rows join (prefill, without their padding), decode, leave (a slot taken by the last row) and join again;
    every row's columns always equal the concatenation of what it was fed, and the buffer is rarely copied."""
    gen = torch.Generator().manual_seed(0)
    store = KVStore()
    prompt, ref_k, ref_v = _prompt([5, 3, 7], gen)
    store.extend(prompt)
    assert store.lengths.tolist() == [5, 3, 7]
    moves, previous = 0, None
    for step in range(150):  # crosses several buffer growths
        k, v = _step(store, store.rows, gen)
        ref_k = [torch.cat([r, k[i]], dim=1) for i, r in enumerate(ref_k)]
        ref_v = [torch.cat([r, v[i]], dim=1) for i, r in enumerate(ref_v)]
        keys, values = store.layer(0)
        for i in range(store.rows):
            n = int(store.lengths[i])
            assert torch.equal(keys[i, :, :n], ref_k[i]) and torch.equal(values[i, :, :n], ref_v[i]), (step, i)
        if previous is not None and keys.untyped_storage().data_ptr() != previous.untyped_storage().data_ptr():
            moves += 1  # a new buffer: the store was copied
        previous = keys
        if step == 60:  # row 0 finishes: the last row moves into its slot
            order = store.keep([1, 2])
            assert order == [2, 1]
            ref_k, ref_v = [ref_k[j] for j in order], [ref_v[j] for j in order]
        if step == 90:  # two rows join the running batch
            prompt, k2, v2 = _prompt([4, 9], gen)
            other = KVStore()
            other.extend(prompt)
            store.absorb(other)
            ref_k, ref_v = ref_k + k2, ref_v + v2
    assert store.rows == 4
    assert moves < 12  # one buffer per growth, not one copy per step


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("q_len", [1, 7])
def test_prompt_attention_equals_repeat_kv_sdpa_under_a_padding_mask(q_len, dtype):
    gen = torch.Generator().manual_seed(1)
    n, s, old = 4, 40, 40 - q_len
    query = torch.randn(n, 6, q_len, 8, generator=gen).to(dtype)
    key, value = torch.randn(n, 2, s, 8, generator=gen).to(dtype), torch.randn(n, 2, s, 8, generator=gen).to(dtype)
    valid = torch.ones(n, s, dtype=torch.bool)
    valid[1, :9] = False  # a left-padded row
    prompt = PromptKV()
    prompt.preload([(key[:, :, :old], value[:, :, :old])], valid[:, :old], torch.arange(old).expand(n, old))
    with torch.inference_mode(), prompt.forward(valid[:, old:], torch.arange(old, s).expand(n, q_len)):
        got, _ = decode_attention(_module(3), query, key[:, :, old:], value[:, :, old:], None, scaling=0.35)
    mask = torch.ones(n, 1, q_len, s, dtype=torch.bool).tril(diagonal=s - q_len) & valid[:, None, None, :]
    want, _ = sdpa_attention_forward(_module(3), query, key, value, mask, scaling=0.35)
    assert got.shape == want.shape == (n, q_len, 6, 8)
    rows = [0, 2, 3] if q_len > 1 else list(range(n))  # row 1's padding queries are garbage on both sides
    tol = 1e-6 if dtype == torch.float32 else 2e-2  # bf16: one rounding of scores and weights (2^-8 relative)
    assert (got[rows].float() - want[rows].float()).abs().max().item() <= tol
    if q_len > 1:
        assert (got[1, 9 - old :].float() - want[1, 9 - old :].float()).abs().max().item() <= tol


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_attention_equals_repeat_kv_sdpa_over_rows_of_different_lengths(dtype):
    gen = torch.Generator().manual_seed(2)
    lengths = [12, 30, 5]
    prompt, _, _ = _prompt(lengths, gen)  # layer 0 of a store whose rows hold 12, 30 and 5 tokens
    prompt.keys[0], prompt.values[0] = prompt.keys[0].to(dtype), prompt.values[0].to(dtype)
    store = KVStore()
    store.extend(prompt)
    query = torch.randn(3, 4, 1, 4, generator=gen).to(dtype)
    key, value = torch.randn(3, 2, 1, 4, generator=gen).to(dtype), torch.randn(3, 2, 1, 4, generator=gen).to(dtype)
    with torch.inference_mode(), store.forward(torch.ones(3, 1, dtype=torch.bool), store.lengths[:, None]):
        got, _ = decode_attention(_module(2), query, key, value, None, scaling=0.3)
    tol = 1e-6 if dtype == torch.float32 else 2e-2
    for i, n in enumerate(lengths):
        k, v = prompt.row(i, 0)
        k, v = torch.cat([k, key[i]], dim=1)[None], torch.cat([v, value[i]], dim=1)[None]  # (1, 2, n + 1, 4)
        want, _ = sdpa_attention_forward(_module(2), query[i : i + 1], k, v, None, scaling=0.3)
        assert (got[i].float() - want[0].float()).abs().max().item() <= tol, i
    assert store.lengths.tolist() == [13, 31, 6]


def test_forwards_outside_the_decode_loop_are_transformers_sdpa():
    module = _module(2)
    query = torch.randn(1, 4, 3, 8, requires_grad=True)
    key, value = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    got, _ = decode_attention(module, query, key, value, None)
    want, _ = sdpa_attention_forward(module, query, key, value, None)
    assert got.requires_grad and torch.equal(got, want)


def test_attention_terms_the_loop_does_not_implement_are_refused():
    store = PromptKV()
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
