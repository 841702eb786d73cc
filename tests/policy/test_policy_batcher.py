"""BatchingPolicy: many threads, few backend calls, errors only for their own caller, clean shutdown."""

from __future__ import annotations

import threading
import time

import pytest
from builders import HANG_MARGIN_S

from metaagent.policy import (
    BatchingPolicy,
    ChatRequest,
    Completion,
    Policy,
    PolicyError,
    RequestError,
    SamplingParams,
    ScriptedPolicy,
)


def _req(text: str, **sampling) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": text}], SamplingParams(**{"max_tokens": 64, **sampling}))


def _run_threads(n: int, fn) -> dict[int, object]:
    out: dict[int, object] = {}
    barrier = threading.Barrier(n)

    def work(i):
        barrier.wait()
        try:
            out[i] = fn(i)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            out[i] = e

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    return out


def _echo(request: ChatRequest) -> str:
    return "echo:" + request.messages[-1]["content"]


def test_sixteen_threads_tiny_model_each_gets_its_own_completion(tiny_policy):
    """16 workflows call at once: each gets exactly what its request gives alone; < 16 backend calls."""
    reqs = [
        _req(f"Question number {i}: what is {i} * {i}?", temperature=1.0, seed=100 + i, max_tokens=8)
        for i in range(16)
    ]
    alone = [tiny_policy.generate([r])[0] for r in reqs]
    with BatchingPolicy(tiny_policy, max_batch_size=32, max_wait_s=0.05) as batcher:
        got = _run_threads(16, lambda i: batcher.generate([reqs[i]])[0])
        stats = batcher.stats()
    for i in range(16):
        assert isinstance(got[i], Completion), got[i]
        assert got[i].prompt_ids == alone[i].prompt_ids  # the prompt of this thread's own request
        assert got[i].response_ids == alone[i].response_ids
    assert len({tuple(alone[i].response_ids) for i in range(16)}) == 16  # outputs are identifiable
    assert stats.backend_calls < 16 and stats.requests == 16
    assert max(stats.batch_sizes) > 1


def test_batches_are_capped_and_callers_get_results_in_order():
    backend = ScriptedPolicy(_echo)
    with BatchingPolicy(backend, max_batch_size=4, max_wait_s=0.05) as batcher:
        got = _run_threads(10, lambda i: [c.text for c in batcher.generate([_req(f"{i}-a"), _req(f"{i}-b")])])
        stats = batcher.stats()
    for i in range(10):
        assert got[i] == [f"echo:{i}-a", f"echo:{i}-b"]
    assert max(backend.batch_sizes) <= 4 and sum(backend.batch_sizes) == 20
    assert stats.backend_calls == len(backend.batch_sizes) < 20


def test_requests_arriving_while_a_batch_runs_form_the_next_batch():
    release = threading.Event()
    started = threading.Event()

    def slow_first(request: ChatRequest) -> str:
        if request.messages[-1]["content"] == "first":
            started.set()
            release.wait(10)
        return _echo(request)

    backend = ScriptedPolicy(slow_first)
    with BatchingPolicy(backend, max_batch_size=32, max_wait_s=0.001) as batcher:
        t = threading.Thread(target=lambda: batcher.generate([_req("first")]))
        t.start()
        assert started.wait(10)
        others = []
        threads = [
            threading.Thread(target=lambda i=i: others.append(batcher.generate([_req(f"n{i}")])))
            for i in range(6)
        ]
        for th in threads:
            th.start()
        time.sleep(0.2)  # all six are queued behind the running batch
        release.set()
        for th in [t, *threads]:
            th.join(10)
    assert backend.batch_sizes == [1, 6]


def test_max_wait_flushes_a_partial_batch_quickly():
    backend = ScriptedPolicy(_echo)
    with BatchingPolicy(backend, max_batch_size=64, max_wait_s=0.01) as batcher:
        t0 = time.monotonic()
        assert batcher.generate([_req("alone")])[0].text == "echo:alone"
        assert time.monotonic() - t0 < 0.01 + HANG_MARGIN_S  # a batcher waiting for 63 more requests never returns


class _Picky(Policy):
    """A backend that fails any batch containing a request whose text contains 'bad'."""

    model_id = "picky"

    def __init__(self) -> None:
        super().__init__()
        self.batch_sizes: list[int] = []

    def check_request(self, request: ChatRequest) -> None:
        if "invalid" in request.messages[-1]["content"]:
            raise RequestError("invalid request: the text says so")

    def _generate(self, requests):
        self.batch_sizes.append(len(requests))
        for r in requests:
            if "bad" in r.messages[-1]["content"]:
                raise PolicyError(f"cannot serve {r.messages[-1]['content']!r}")
        return [Completion(_echo(r), [1], [2], [0.0], "stop", "picky") for r in requests]


def test_a_failing_request_fails_only_its_caller():
    backend = _Picky()
    with BatchingPolicy(backend, max_batch_size=16, max_wait_s=0.1) as batcher:
        got = _run_threads(8, lambda i: batcher.generate([_req("bad-3" if i == 3 else f"ok-{i}")])[0].text)
        stats = batcher.stats()
    assert isinstance(got[3], PolicyError) and "bad-3" in str(got[3])
    for i in range(8):
        if i != 3:
            assert got[i] == f"echo:ok-{i}"
    assert stats.retried_batches >= 1 and stats.failed_requests == 1


def test_invalid_request_fails_in_caller_thread_before_batching():
    backend = _Picky()
    with BatchingPolicy(backend, max_wait_s=0.001) as batcher:
        with pytest.raises(RequestError, match="invalid request"):
            batcher.generate([_req("invalid one")])
        assert batcher.stats().backend_calls == 0
        assert batcher.generate([_req("fine")])[0].text == "echo:fine"


def test_a_caller_with_several_requests_gets_the_error_if_one_fails():
    backend = _Picky()
    with BatchingPolicy(backend, max_wait_s=0.001) as batcher:
        with pytest.raises(PolicyError, match="bad-x"):
            batcher.generate([_req("ok"), _req("bad-x"), _req("ok2")])
        assert batcher.generate([_req("ok3")])[0].text == "echo:ok3"  # the batcher keeps working


def test_close_joins_threads_and_refuses_new_work():
    before = {t.ident for t in threading.enumerate()}
    batcher = BatchingPolicy(ScriptedPolicy(_echo), max_in_flight=2)
    batcher.generate([_req("x")])
    batcher.close()
    batcher.close()  # idempotent
    leaked = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert leaked == []
    with pytest.raises(PolicyError, match="closed"):
        batcher.generate([_req("y")])


def test_close_finishes_queued_requests():
    release = threading.Event()

    def gated(request):
        release.wait(10)
        return _echo(request)

    batcher = BatchingPolicy(ScriptedPolicy(gated), max_batch_size=1, max_wait_s=0)
    results = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(batcher.generate([_req(str(i))])[0].text))
        for i in range(3)
    ]
    for t in threads:
        t.start()
    time.sleep(0.1)
    closer = threading.Thread(target=batcher.close)
    closer.start()
    release.set()
    closer.join(10)
    for t in threads:
        t.join(10)
    assert sorted(results) == ["echo:0", "echo:1", "echo:2"]


def test_max_in_flight_runs_batches_concurrently():
    active, peak = [0], [0]
    lock = threading.Lock()

    def slow(request):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.2)
        with lock:
            active[0] -= 1
        return _echo(request)

    backend = ScriptedPolicy(slow)
    with BatchingPolicy(backend, max_batch_size=1, max_wait_s=0, max_in_flight=3) as batcher:
        _run_threads(6, lambda i: batcher.generate([_req(str(i))]))
    assert peak[0] == 3


def test_usage_and_identity_follow_the_backend(tiny_policy):
    with BatchingPolicy(tiny_policy) as batcher:
        assert batcher.model_id == "tiny" and batcher.provides_logprobs
        batcher.require_logprobs()
        batcher.generate(
            [
                ChatRequest(
                    [{"role": "user", "content": "hi"}], SamplingParams(max_tokens=2, seed=0), role="designer"
                )
            ]
        )
        assert batcher.usage.snapshot()["completion_tokens"] == {"designer": 2}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"max_wait_s": -1}, "max_wait_s"),
        ({"max_in_flight": 0}, "max_in_flight"),
    ],
)
def test_bad_configuration(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BatchingPolicy(ScriptedPolicy(_echo), **kwargs)


def test_the_batcher_is_continuous_only_when_each_request_is_its_own_backend_call():
    from metaagent.policy import ScriptedPolicy

    class Continuous(ScriptedPolicy):
        continuous = True

    assert BatchingPolicy(Continuous(["x"]), max_batch_size=1, max_in_flight=8).continuous
    assert not BatchingPolicy(Continuous(["x"]), max_batch_size=4, max_in_flight=8).continuous  # calls grouped
    assert not BatchingPolicy(ScriptedPolicy(["x"]), max_batch_size=1, max_in_flight=8).continuous
