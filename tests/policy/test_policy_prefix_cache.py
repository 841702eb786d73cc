"""Prefix reuse in the hf backend: exact same tokens and log-probs with and without it, dropped when the
weights change, and memory under the configured bound."""

from __future__ import annotations

import threading

import pytest

from metaagent.policy import ChatRequest, SamplingParams
from metaagent.policy.batcher import BatchingPolicy
from metaagent.policy.hf import HFPolicy, _RunningBatch
from metaagent.policy.prefix_cache import PrefixCache, shared_prefix_lengths

LONG = "You are a careful solver. Check every step twice and answer briefly. " * 6
SHORT = "You are terse. " * 3
BLOCK = 16


def _requests(max_tokens: int = 10) -> list[ChatRequest]:
    """Rows with different cached-prefix lengths in one batch: two long-system groups, a short-system pair
    and one row that shares nothing but the chat template; temperatures 1.0 and 0.7."""
    specs = [(LONG, "task one"), (LONG, "task two is longer " * 3), (SHORT, "task three"), (SHORT, "task four"),
             ("Different.", "alone"), (LONG, "task one")]  # fmt: skip
    return [
        ChatRequest(
            [{"role": "system", "content": system}, {"role": "user", "content": user}],
            SamplingParams(max_tokens=max_tokens, seed=100 + i, temperature=(1.0, 0.7)[i % 2]),
        )
        for i, (system, user) in enumerate(specs)
    ]


def _assert_same(got, want) -> None:
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.response_ids == b.response_ids, i
        assert a.prompt_ids == b.prompt_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) <= 1e-5, i


@pytest.fixture(scope="module")
def plain(tiny_policy):
    return HFPolicy(tiny_policy.model, tiny_policy.tokenizer, prefix_cache_mb=0)


def test_shared_prefix_lengths_are_block_aligned_and_leave_the_last_token():
    a, b, c = [1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 9], [8, 8]
    assert shared_prefix_lengths([a, b, c], 2) == [4, 4, 0]
    assert shared_prefix_lengths([a, a[:4]], 2) == [4, 2]  # the 4-token prompt keeps its last token out


def _spy_prefix_blocks(monkeypatch) -> list[list[int]]:
    """Per prefill of real rows (more than one prompt), each row's number of cached blocks."""
    seen: list[list[int]] = []
    original = _RunningBatch.prefill

    def prefill(self, prompts, chains, *args, **kwargs):
        if len(prompts) > 1:
            seen.append([len(c) for c in chains])
        return original(self, prompts, chains, *args, **kwargs)

    monkeypatch.setattr(_RunningBatch, "prefill", prefill)
    return seen


def test_static_batch_with_different_prefix_lengths_is_exact(tiny_policy, plain, monkeypatch):
    reuse = HFPolicy(tiny_policy.model, tiny_policy.tokenizer, prefix_block=BLOCK)
    reqs = _requests()
    want = plain.generate(reqs)
    seen = _spy_prefix_blocks(monkeypatch)
    first = reuse.generate(reqs)  # shared prefixes prefilled once inside the batch
    stats = reuse.prefix_cache.stats
    assert stats.shared_prefills >= 2 and stats.hit_tokens > 0
    assert len(set(seen[0])) >= 3 and min(seen[0]) == 0  # rows of one batch start at different lengths
    second = reuse.generate(reqs[::-1])[::-1]  # now every full block of every prompt is cached
    _assert_same(first, want)
    _assert_same(second, want)
    saved = stats.hit_tokens / (stats.hit_tokens + stats.prefilled_tokens)
    assert saved > 0.5


def test_continuous_batching_with_prefix_reuse_is_exact(tiny_policy, plain):
    reuse = HFPolicy(tiny_policy.model, tiny_policy.tokenizer, continuous=True, max_batch_size=4, prefix_block=BLOCK)
    reqs = _requests(max_tokens=8)
    want = plain.generate(reqs)
    got: dict[int, object] = {}
    start = threading.Barrier(len(reqs))

    def call(i):
        start.wait()
        got[i] = reuse.generate([reqs[i]])[0]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    _assert_same([got[i] for i in range(len(reqs))], want)
    assert reuse.prefix_cache.stats.hit_tokens > 0


def _fresh_tiny():
    return HFPolicy("tiny", prefix_block=BLOCK)


def _nudge(model) -> None:
    import torch

    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))


def test_changed_weights_drop_the_cache_even_without_the_hook():
    policy = _fresh_tiny()
    reqs = _requests(max_tokens=6)
    before = policy.generate(reqs)
    assert len(policy.prefix_cache) > 0
    _nudge(policy.model)  # an in-place change nobody announced: the fingerprint guard catches it
    after = policy.generate(reqs)
    assert policy.prefix_cache.stats.invalidations == 1
    plain = HFPolicy(policy.model, policy.tokenizer, prefix_cache_mb=0)
    _assert_same(after, plain.generate(reqs))  # the new weights' numbers, not the stale cache's
    assert any(
        max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) > 1e-3 for a, b in zip(before, after)
    )


def test_weights_changed_hook_reaches_the_cache_through_the_batcher():
    policy = _fresh_tiny()
    front = BatchingPolicy(policy)
    try:
        front.generate(_requests(max_tokens=2))
        version = policy.prefix_cache.weights_version
        assert len(policy.prefix_cache) > 0
        front.weights_changed()
        assert len(policy.prefix_cache) == 0 and policy.prefix_cache.nbytes == 0
        assert policy.prefix_cache.weights_version == version + 1
    finally:
        front.close()


def test_memory_stays_under_the_bound_and_results_stay_exact(tiny_policy, plain):
    c = tiny_policy.model.config
    heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    block_bytes = c.num_hidden_layers * 2 * heads * (c.hidden_size // c.num_attention_heads) * 4 * BLOCK
    mb = 10 * block_bytes / 2**20  # room for 10 blocks: less than the 4 x 4 prompts below need
    reuse = HFPolicy(tiny_policy.model, tiny_policy.tokenizer, prefix_cache_mb=mb, prefix_block=BLOCK)
    cache = reuse.prefix_cache
    assert cache.max_bytes == int(mb * 2**20)
    for k in range(4):
        reqs = [
            ChatRequest(
                [{"role": "system", "content": f"System {k}. " + LONG}, {"role": "user", "content": f"q{k}.{i}"}],
                SamplingParams(max_tokens=3, seed=k * 10 + i),
            )
            for i in range(4)
        ]
        _assert_same(reuse.generate(reqs), plain.generate(reqs))
        assert 0 < cache.nbytes <= cache.max_bytes
    assert cache.stats.evicted_blocks > 0
    assert cache.nbytes == sum(b.nbytes for b in cache._blocks.values())


def test_eviction_keeps_prefixes_that_longer_prompts_need():
    import torch

    cache = PrefixCache(max_bytes=3 * 64, block=2)  # 3 blocks of 64 bytes (1 layer, 2 x (1, 2, 4) fp32)
    kv = [(torch.zeros(1, 8, 4), torch.zeros(1, 8, 4))]
    cache.insert([1, 2, 3, 4], 0, kv)  # root (1, 2) <- (3, 4)
    cache.insert([5, 6], 0, kv)
    cache.insert([7, 8], 0, kv)  # full: evicts the oldest leaf, (3, 4), never its parent first
    assert len(cache.match([1, 2, 3, 4, 0], 4)) == 1 and cache.nbytes <= cache.max_bytes
    assert len(cache.match([7, 8, 0], 2)) == 1
