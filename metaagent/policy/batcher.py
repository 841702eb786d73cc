"""Gather the calls of many threads into few, large backend batches.

During a rollout, B x M x N workflow scripts run at once and each blocks on an agent call with one or a
few requests. :class:`BatchingPolicy` puts every request in one queue; a single dispatcher thread takes
up to ``max_batch_size`` of them, waiting at most ``max_wait_s`` after the oldest one arrived, and hands
them to the backend as one ``generate`` call. While a batch runs, new requests queue up and form the next.

Errors reach only the caller whose request failed: requests are checked in the caller's thread before
they are queued (``backend.check_request`` when the backend has one), and if a batched backend call
raises, its requests are retried one by one so that only the culprit fails.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .base import ChatRequest, Completion, Policy, PolicyError


class _Ticket:
    """The results of one caller's ``generate`` call, filled in by the dispatcher."""

    def __init__(self, n: int) -> None:
        self.results: list[Completion | None] = [None] * n
        self.error: BaseException | None = None
        self._remaining = n
        self._lock = threading.Lock()
        self.done = threading.Event()

    def resolve(self, pos: int, result: Completion | None = None, error: BaseException | None = None) -> None:
        with self._lock:
            if error is not None and self.error is None:
                self.error = error
            self.results[pos] = result
            self._remaining -= 1
            if self._remaining == 0:
                self.done.set()


@dataclass
class _Pending:
    request: ChatRequest
    ticket: _Ticket
    pos: int
    arrived: float = field(default_factory=time.monotonic)


@dataclass
class BatcherStats:
    """Counters for tests and metrics (read them through :meth:`BatchingPolicy.stats`)."""

    backend_calls: int = 0  # batched calls, not counting one-by-one retries
    batch_sizes: list[int] = field(default_factory=list)
    retried_batches: int = 0  # batched calls that raised and were retried request by request
    failed_requests: int = 0

    @property
    def requests(self) -> int:
        return sum(self.batch_sizes)

    @property
    def mean_batch_size(self) -> float:
        return self.requests / len(self.batch_sizes) if self.batch_sizes else 0.0


class BatchingPolicy(Policy):
    """A thread-safe front for ``backend`` that batches concurrent calls.

    Args:
        backend: the policy that does the generation (e.g. :class:`~metaagent.policy.hf.HFPolicy`).
        max_batch_size: at most this many requests per backend call.
        max_wait_s: how long the oldest queued request may wait for company before its batch is sent.
        max_in_flight: backend calls that may run at once (1 for a local model; more for a remote server
            whose latency, not compute, bounds throughput).
        close_backend: whether :meth:`close` also closes the backend.
    """

    def __init__(
        self,
        backend: Policy,
        *,
        max_batch_size: int = 32,
        max_wait_s: float = 0.005,
        max_in_flight: int = 1,
        close_backend: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(backend, Policy):
            raise TypeError(f"backend must be a Policy, got {type(backend).__name__}")
        if not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ValueError(f"max_batch_size must be a positive integer, got {max_batch_size!r}")
        if not max_wait_s >= 0:
            raise ValueError(f"max_wait_s must be >= 0 seconds, got {max_wait_s!r}")
        if not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be a positive integer, got {max_in_flight!r}")
        self.backend = backend
        self.model_id = backend.model_id
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.max_in_flight = max_in_flight
        self.close_backend = close_backend
        self._queue: collections.deque[_Pending] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._stats = BatcherStats()
        self._stats_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._workers = ThreadPoolExecutor(max_in_flight, thread_name_prefix="metaagent-batch")
        self._dispatcher = threading.Thread(target=self._dispatch_loop, name="metaagent-batcher", daemon=True)
        self._dispatcher.start()

    # ------------------------------------------------------------------------------------------ caller side
    @property
    def provides_logprobs(self) -> bool:  # type: ignore[override]
        return self.backend.provides_logprobs

    @property
    def continuous(self) -> bool:  # type: ignore[override]
        """The backend's (each request its own backend call: ``max_batch_size=1`` with enough in flight)."""
        return self.backend.continuous and self.max_batch_size == 1 and self.max_in_flight > 1

    def require_logprobs(self, purpose: str = "RL training") -> None:
        self.backend.require_logprobs(purpose)

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        check = getattr(self.backend, "check_request", None)
        if check is not None:
            for r in requests:  # a bad request fails here, in its caller's thread, before batching
                check(r)
        ticket = _Ticket(len(requests))
        with self._cond:
            if self._closed:
                raise PolicyError("BatchingPolicy is closed; create a new one to generate again")
            self._queue.extend(_Pending(r, ticket, i) for i, r in enumerate(requests))
            self._cond.notify_all()
        ticket.done.wait()
        if ticket.error is not None:
            raise ticket.error
        return ticket.results  # type: ignore[return-value]

    def weights_changed(self) -> None:
        self.backend.weights_changed()

    def free_memory(self) -> None:
        self.backend.free_memory()

    def stats(self) -> BatcherStats:
        """A copy of the counters."""
        with self._stats_lock:
            s = self._stats
            return BatcherStats(s.backend_calls, list(s.batch_sizes), s.retried_batches, s.failed_requests)

    def close(self, timeout: float | None = None) -> None:
        """Stop accepting requests, finish the queued ones, and join the threads. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._dispatcher is not threading.current_thread():
            self._dispatcher.join(timeout)
        self._workers.shutdown(wait=True)
        if self.close_backend:
            self.backend.close()

    # -------------------------------------------------------------------------------------- dispatcher side
    def _dispatch_loop(self) -> None:
        while True:
            self._slots.acquire()  # while every slot is busy, requests keep queueing for the next batch
            batch = self._next_batch()
            if batch is None:
                self._slots.release()
                return
            self._workers.submit(self._run_and_release, batch)

    def _next_batch(self) -> list[_Pending] | None:
        """Block until a batch is due: full, or its oldest request waited ``max_wait_s``. None = closed."""
        with self._cond:
            while not self._queue:
                if self._closed:
                    return None
                self._cond.wait()
            deadline = self._queue[0].arrived + self.max_wait_s
            while len(self._queue) < self.max_batch_size and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            n = min(len(self._queue), self.max_batch_size)
            return [self._queue.popleft() for _ in range(n)]

    def _run_and_release(self, batch: list[_Pending]) -> None:
        try:
            self._run(batch)
        finally:
            self._slots.release()

    def _run(self, batch: list[_Pending]) -> None:
        with self._stats_lock:
            self._stats.backend_calls += 1
            self._stats.batch_sizes.append(len(batch))
        try:
            completions = self.backend.generate([p.request for p in batch])
        except BaseException as e:  # noqa: BLE001 - every error must reach a caller, never kill the thread
            if len(batch) == 1:
                self._fail(batch[0], e)
                return
            with self._stats_lock:
                self._stats.retried_batches += 1
            for p in batch:  # only the culprit(s) fail
                try:
                    p.ticket.resolve(p.pos, self.backend.generate([p.request])[0])
                except BaseException as e1:  # noqa: BLE001
                    self._fail(p, e1)
            return
        for p, c in zip(batch, completions):
            p.ticket.resolve(p.pos, c)

    def _fail(self, p: _Pending, error: BaseException) -> None:
        with self._stats_lock:
            self._stats.failed_requests += 1
        p.ticket.resolve(p.pos, error=error)
