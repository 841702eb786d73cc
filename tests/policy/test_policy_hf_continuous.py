"""HFPolicy(continuous=True): callers' requests join the running batch between decode steps."""

from __future__ import annotations

import threading

import pytest

from metaagent.policy import ChatRequest, SamplingParams
from metaagent.policy.hf import HFPolicy, _RunningBatch


@pytest.fixture(scope="module")
def continuous(tiny_policy):
    return HFPolicy(tiny_policy.model, tiny_policy.tokenizer, continuous=True, max_batch_size=6)


def _req(i: int, max_tokens: int) -> ChatRequest:
    text = f"request {i}: " + "tell me more " * (i % 5)  # different prompt lengths: merges need padding
    return ChatRequest([{"role": "user", "content": text}], SamplingParams(max_tokens=max_tokens, seed=i))


def _spy_batch_sizes(monkeypatch) -> list[int]:
    sizes: list[int] = []
    original = _RunningBatch.step

    def step(self):
        sizes.append(len(self.rows))
        original(self)

    monkeypatch.setattr(_RunningBatch, "step", step)
    return sizes


def test_late_requests_join_and_match_running_alone(continuous, tiny_policy, forward_logprobs, monkeypatch):
    reqs = [_req(i, 6 + 3 * (i % 4)) for i in range(10)]
    alone = [tiny_policy.generate([r])[0] for r in reqs]
    sizes = _spy_batch_sizes(monkeypatch)
    got: dict[int, object] = {}
    start = threading.Barrier(10)

    def call(i):
        start.wait()
        got[i] = continuous.generate([reqs[i]])[0]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i in range(10):
        assert got[i].response_ids == alone[i].response_ids, i
        ref = forward_logprobs(tiny_policy, got[i], 1.0)
        assert max(abs(a - b) for a, b in zip(got[i].logprobs, ref.tolist())) < 1e-4
    assert max(sizes) > 1  # rows of different callers decoded together
    assert max(sizes) <= continuous.max_batch_size
    assert continuous._running is None or not continuous._running.rows


def test_many_requests_in_one_call(continuous, tiny_policy):
    reqs = [_req(i, 3 + i) for i in range(9)]  # more than max_batch_size: admitted as rows free up
    out = continuous.generate(reqs)
    assert [len(c.response_ids) for c in out] == [3 + i for i in range(9)]
    assert [c.response_ids for c in out] == [c.response_ids for c in tiny_policy.generate(reqs)]


def test_a_failure_fails_the_batch_and_the_policy_recovers(tiny_policy, monkeypatch):
    policy = HFPolicy(tiny_policy.model, tiny_policy.tokenizer, continuous=True)
    calls = {"n": 0}
    original = policy._forward

    def flaky_forward(*args):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("device lost")
        return original(*args)

    monkeypatch.setattr(policy, "_forward", flaky_forward)
    with pytest.raises(RuntimeError, match="device lost"):
        policy.generate([_req(1, 8), _req(2, 8)])
    assert policy._running is None
    out = policy.generate([_req(1, 4)])[0]
    assert out.response_ids == tiny_policy.generate([_req(1, 4)])[0].response_ids


def test_a_failing_admission_fails_the_rows_being_admitted(tiny_policy, monkeypatch):
    policy = HFPolicy(tiny_policy.model, tiny_policy.tokenizer, continuous=True)

    def broken_admit(self, rows):
        raise RuntimeError("prefill failed")

    monkeypatch.setattr(_RunningBatch, "admit", broken_admit)
    with pytest.raises(RuntimeError, match="prefill failed"):  # raises instead of waiting forever
        policy.generate([_req(1, 4), _req(2, 4)])
    assert not policy._pending


def test_a_caller_returns_when_its_rows_finish_while_others_keep_decoding(continuous):
    """A short request that joined a long one returns at once, not when the long one ends."""
    long_done = threading.Event()

    def long_call():
        continuous.generate([_req(1, 600)])
        long_done.set()

    t = threading.Thread(target=long_call)
    t.start()
    while continuous._running is None or not continuous._running.rows:  # the long row is decoding
        assert t.is_alive()
        long_done.wait(0.01)
    short = continuous.generate([_req(2, 3)])[0]
    assert len(short.response_ids) == 3
    assert not long_done.is_set()  # 600 steps of the long row were still ahead when the short one returned
    t.join(120)
    assert long_done.is_set()
