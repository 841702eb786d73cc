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
from metaagent.policy.kv import (
    DECODE_ATTENTION,
    GROW_MIN,
    DecodeAttentionError,
    KVStore,
    PromptKV,
    decode_attention,
)
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


# ------------------------------------------------------------------------------ shared prefixes (cascade attention)
def _row(keys: torch.Tensor, values: torch.Tensor) -> PromptKV:
    """A one-row prefill holding layer 0's ``keys``/``values`` (2, L, 4) at positions 0 .. L - 1."""
    prompt = PromptKV()
    n = keys.shape[1]
    prompt.preload([(keys[None], values[None])], torch.ones(1, n, dtype=torch.bool), torch.arange(n)[None])
    return prompt


def _rows(prefixes: dict, spec: list[tuple[str | None, int]], gen: torch.Generator, dtype: torch.dtype):
    """One-row prefills of rows ``(prefix name or None, own tokens)``; a prefix name's keys/values are the same
    tensors for every row that starts with it. Returns [(prompt, shared ids, keys, values)]."""
    out = []
    for name, own in spec:
        ids, pk, pv = prefixes[name] if name else ((), torch.zeros(2, 0, 4), torch.zeros(2, 0, 4))
        k = torch.cat([pk, torch.randn(2, own, 4, generator=gen)], 1).to(dtype)
        v = torch.cat([pv, torch.randn(2, own, 4, generator=gen)], 1).to(dtype)
        out.append((_row(k, v), ids, k, v))
    return out


def _prefix(first: int, n: int, gen: torch.Generator) -> tuple[tuple[int, ...], torch.Tensor, torch.Tensor]:
    return tuple(range(first, first + n)), torch.randn(2, n, 4, generator=gen), torch.randn(2, n, 4, generator=gen)


def _store_of(rows) -> KVStore:
    store = KVStore()
    for prompt, ids, _, _ in rows:  # one row at a time, as the hf backend's prefill extends it
        store.extend(prompt, [ids])
    return store


def _windowed_sdpa(query, keys, values, window: int | None, scaling: float) -> torch.Tensor:
    """transformers' sdpa of one decode query (1, 4, 1, 4) over a row's keys/values (1, 2, L, 4), the query at
    position L - 1; with ``window``, only positions ``p`` with ``L - 1 - p < window``."""
    n = keys.shape[2]
    allowed = (n - 1 - torch.arange(n) < window) if window is not None else torch.ones(n, dtype=torch.bool)
    want, _ = sdpa_attention_forward(_module(2), query, keys, values, allowed[None, None, None, :], scaling=scaling)
    return want[0]


@pytest.mark.parametrize("window", [None, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shared_prefix_attention_equals_sdpa_as_rows_finish_and_join(dtype, window):
    """Rows of two shared prefixes (each held once) and a row of its own decode; rows finish (one prefix's last
    row with it: the prefix is dropped) and join (one onto a held prefix, two with a new one, one alone); at every
    step every row's attention equals sdpa over the tokens it was fed, sliding window included, and the store
    gives back each row's tokens in position order."""
    gen = torch.Generator().manual_seed(3)
    prefixes = {name: _prefix(100 * i, n, gen) for i, (name, n) in enumerate([("A", 20), ("B", 18), ("C", 25)])}
    rows = _rows(prefixes, [("A", 3), ("A", 1), ("B", 5), ("B", 2), (None, 9)], gen, dtype)
    store = _store_of(rows)
    assert store.prefix_ids == [prefixes["A"][0], prefixes["B"][0]] and store.prefix_keys[0].shape[0] == 2
    assert store.lengths.tolist() == [23, 21, 23, 20, 9] and store.capacity == 9 + GROW_MIN  # own columns only
    ref = [(k, v) for _, _, k, v in rows]
    tol = 1e-6 if dtype == torch.float32 else 2e-2
    for step in range(16):
        n = store.rows
        query = torch.randn(n, 4, 1, 4, generator=gen).to(dtype)
        key, value = torch.randn(n, 2, 1, 4, generator=gen).to(dtype), torch.randn(n, 2, 1, 4, generator=gen).to(dtype)
        with torch.inference_mode(), store.forward(torch.ones(n, 1, dtype=torch.bool), store.lengths[:, None]):
            got, _ = decode_attention(_module(2), query, key, value, None, scaling=0.4, sliding_window=window)
        ref = [(torch.cat([k, key[i]], 1), torch.cat([v, value[i]], 1)) for i, (k, v) in enumerate(ref)]
        for i, (k, v) in enumerate(ref):
            want = _windowed_sdpa(query[i : i + 1], k[None], v[None], window, 0.4)
            assert (got[i].float() - want.float()).abs().max().item() <= tol, (step, i)
            assert all(torch.equal(a, b) for a, b in zip(store.row(i, 0), (k, v))), (step, i)
        if step == 4:  # row 1 finishes
            ref = [ref[j] for j in store.keep([0, 2, 3, 4])]
        if step == 7:  # both rows of prefix B finish: B is dropped
            ref = [ref[j] for j in store.keep([0, 1])]  # rows: A, alone, B, B
            assert store.prefix_ids == [prefixes["A"][0]] and store.prefix_keys[0].shape[0] == 1
        if step == 9:  # rows join mid-decode: one onto A (held already), two with a new prefix C, one alone
            joining = _rows(prefixes, [("A", 2), ("C", 4), ("C", 1), (None, 6)], gen, dtype)
            store.absorb(_store_of(joining))
            ref += [(k, v) for _, _, k, v in joining]
            assert store.prefix_ids == [prefixes["A"][0], prefixes["C"][0]]
    assert store.rows == 6


def test_rows_without_any_shared_prefix_take_the_plain_path(monkeypatch):
    """A store without shared prefixes never runs the cascade (the attention of PR-era stores, unchanged)."""
    import metaagent.policy.kv as kv

    calls = []
    monkeypatch.setattr(kv, "_attend_cascade", lambda *a: calls.append(a))
    gen = torch.Generator().manual_seed(4)
    store = _store_of(_rows({}, [(None, 5), (None, 8)], gen, torch.float32))
    _step(store, 2, gen)
    assert calls == [] and store.prefix_ids == []


def test_shared_prefixes_pick_prefixes_that_save_enough_reading(monkeypatch):
    """A prefix is shared where (rows - 1) x its tokens >= SHARE_MIN_SAVED, never a prompt's last token, the one
    saving most first (samples of one prompt before a system prompt of all); or a longer prefix held already."""
    import metaagent.policy.kv as kv

    monkeypatch.setattr(kv, "SHARE_MIN_SAVED", 60)
    system = list(range(40))
    a, b, c = system + list(range(500, 530)) + [901], system + [903, 904], system + [905]
    got = kv.shared_prefixes([a, a, b, a, c, a])
    assert got[0] == got[1] == got[3] == got[5] == tuple(a[:-1])  # four samples of a: 3 x 70 columns saved ...
    assert got[2] == got[4] == ()  # ... before the system prompt of all six (5 x 40); b and c alone: 1 x 40 < 60
    assert kv.shared_prefixes([a, b, c]) == [tuple(system)] * 3  # 2 x 40 >= 60
    monkeypatch.setattr(kv, "SHARE_MIN_SAVED", 41)
    assert kv.shared_prefixes([a, b]) == [(), ()]  # 1 x 40 < 41
    assert kv.shared_prefixes([b], held=[tuple(system)]) == [tuple(system)]  # joins a held prefix
    assert kv.shared_prefixes([system], held=[tuple(system)]) == [()]  # a held prefix never covers a whole prompt


def test_extend_refuses_a_shared_prefix_as_long_as_the_row():
    gen = torch.Generator().manual_seed(5)
    (prompt, _, _, _), = _rows({}, [(None, 4)], gen, torch.float32)
    with pytest.raises(DecodeAttentionError, match="shorter than the row"):
        KVStore().extend(prompt, [(1, 2, 3, 4)])


def test_samples_of_one_prompt_share_its_keys_in_the_decode_loop(forward_logprobs, monkeypatch):
    """Four samples of one prompt and two of another through a continuous batch of 3 (rows join as others leave):
    the running batch holds each prompt's keys once, and every row's log-probs equal one full forward's."""
    import metaagent.policy.kv as kv
    from metaagent.policy import hf

    monkeypatch.setattr(kv, "SHARE_MIN_SAVED", 16)  # the tiny prompts are short
    held = []
    step = hf._RunningBatch.step
    monkeypatch.setattr(hf._RunningBatch, "step", lambda self: (held.append(len(self.store.prefix_ids)), step(self)))
    reference, tokenizer = load_model_and_tokenizer("tiny")
    policy = HFPolicy(reference, tokenizer, prefix_cache_mb=0, continuous=True, max_batch_size=3)
    messages = [r.messages for r in _requests(4, 10)]
    requests = [
        ChatRequest(messages[0 if i < 4 else 3], SamplingParams(max_tokens=10, temperature=1.0, seed=i)) for i in range(6)
    ]
    completions = policy.generate(requests)
    assert max(held) >= 1  # rows decoded with a shared prefix
    for c in completions:
        ref = forward_logprobs(policy, c, 1.0)
        assert max(abs(a - b) for a, b in zip(c.logprobs, ref.tolist())) < 1e-4
