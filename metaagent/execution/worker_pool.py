"""A small pool of long-lived helper processes that answer JSON-line requests under a deadline.

Used for work that may hang or blow up (sympy simplification inside math-verify): each request runs in a
separate process, so a request that misses its deadline is stopped by killing that process (its whole
process group), and the pool starts a fresh one on the next request. Nothing relies on signals in the
caller, so the pool works from any thread, inside daemonic ``multiprocessing`` workers (the helpers are
started with ``subprocess``, not ``multiprocessing``) and in forked children (a pool belongs to the process
that created it; :func:`shared_pool` gives each process its own).

Protocol: the helper writes one JSON line ``{"ready": true}`` after start-up, then answers each request
line with exactly one response line.

A request's deadline is CPU time of the helper, as for code tests (:mod:`.code_runner`): a helper that has
used ``timeout_s`` CPU seconds on the request is stopped, and the wall clock (``WALL_FACTOR`` times as
much) only stops one that never gets the CPU to finish. A check is not failed because the machine was busy.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

from .errors import CheckTimeout, ExecutionError, WorkerCrashed
from .process import WALL_FACTOR, cpu_seconds, kill_process


class _HelperWorker:
    def __init__(self, argv: Sequence[str], env: dict[str, str] | None, startup_timeout_s: float) -> None:
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # own process group: a kill reaches anything it started
            close_fds=True,
        )
        self._buf = b""
        try:
            ready = self._read_line(time.monotonic() + startup_timeout_s)
        except WorkerCrashed as e:
            self.kill()
            raise WorkerCrashed(
                f"helper {' '.join(argv)!r} failed to start ({e}); run it by hand to see why"
            ) from e
        except BaseException:
            self.kill()
            raise
        if json.loads(ready).get("ready") is not True:
            self.kill()
            raise WorkerCrashed(f"helper {argv!r} did not report ready: {ready[:200]!r}")

    def request(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """The answer to ``payload``; :class:`CheckTimeout` once the helper has used ``timeout_s`` CPU seconds
        on it, or after ``WALL_FACTOR * timeout_s`` of wall clock (where CPU time cannot be read: the wall
        clock alone, ``timeout_s``)."""
        assert self.proc.stdin is not None
        cpu_start = cpu_seconds(self.proc.pid)
        self.proc.stdin.write(json.dumps(payload).encode() + b"\n")
        self.proc.stdin.flush()
        start = time.monotonic()
        wall_end = start + (timeout_s if cpu_start is None else WALL_FACTOR * timeout_s)
        deadline = start + timeout_s
        while True:
            try:
                line = self._read_line(min(deadline, wall_end))
                break
            except CheckTimeout:
                cpu_now = None if cpu_start is None else cpu_seconds(self.proc.pid)
                if cpu_start is None or cpu_now is None or time.monotonic() >= wall_end:
                    raise
                left = timeout_s - (cpu_now - cpu_start)
                if left <= 0.01:
                    raise
                deadline = time.monotonic() + left  # the helper waited for the CPU: it may use what is left
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            raise WorkerCrashed(f"helper answered a line that is not JSON: {line[:200]!r}") from None

    def _read_line(self, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CheckTimeout("helper process did not answer before the deadline")
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                raise CheckTimeout("helper process did not answer before the deadline")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                code = self.proc.wait(timeout=5)
                raise WorkerCrashed(f"helper process exited with code {code} while handling a request")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def kill(self) -> None:
        kill_process(self.proc)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class WorkerPool:
    """Up to ``size`` helper processes running ``argv``; thread-safe.

    :meth:`call` sends one request to an idle helper (starting one if fewer than ``size`` run, else waiting
    for one to be free) and returns its answer. If the helper spends ``timeout_s`` CPU seconds on the request
    without answering (or ``WALL_FACTOR`` times that in wall clock, counted from when the request is sent, not
    from when the caller started waiting for a free helper), it is killed and :class:`CheckTimeout` is
    raised; if the helper dies, :class:`WorkerCrashed`.
    """

    def __init__(
        self,
        argv: Sequence[str],
        size: int,
        *,
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 120.0,
    ) -> None:
        if size < 1:
            raise ValueError(f"WorkerPool size must be >= 1, got {size}")
        self.argv = list(argv)
        self.size = size
        self.env = env
        self.startup_timeout_s = startup_timeout_s
        self._idle: list[_HelperWorker] = []
        self._running = 0
        self._cond = threading.Condition()
        self._closed = False
        self.started = 0  # helpers started so far (replacements after kills included)
        self.killed = 0  # helpers killed after a timeout or crash

    def call(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        worker = self._acquire()
        try:
            answer = worker.request(payload, timeout_s)
        except BaseException:
            worker.kill()
            self._forget(worker, killed=True)
            raise
        self._release(worker)
        return answer

    def _acquire(self) -> _HelperWorker:
        with self._cond:
            while True:
                if self._closed:
                    raise ExecutionError("the worker pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._running < self.size:
                    self._running += 1
                    break
                self._cond.wait()
        try:
            worker = _HelperWorker(self.argv, self.env, self.startup_timeout_s)
        except BaseException:
            self._forget(None, killed=False)
            raise
        with self._cond:
            self.started += 1
        return worker

    def _release(self, worker: _HelperWorker) -> None:
        with self._cond:
            if self._closed:
                worker.kill()
                self._running -= 1
            else:
                self._idle.append(worker)
            self._cond.notify()

    def _forget(self, worker: _HelperWorker | None, *, killed: bool) -> None:
        with self._cond:
            self._running -= 1
            if killed:
                self.killed += 1
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._running -= len(idle)
            self._cond.notify_all()
        for worker in idle:
            worker.kill()


#: the most helpers a shared pool runs by default (each is a Python process kept for the next request)
MAX_DEFAULT_HELPERS = 4


def helper_count(env: str) -> int:
    """How many helpers a shared pool runs: the environment variable ``env`` if set, else the CPU count, at
    most :data:`MAX_DEFAULT_HELPERS` and at least 1."""
    value = os.environ.get(env, "")
    try:
        wanted = int(value) if value.strip() else (os.cpu_count() or 1)
    except ValueError:
        raise ValueError(f"{env}={value!r} must be a whole number of helper processes, e.g. {env}=2") from None
    return max(1, min(MAX_DEFAULT_HELPERS, wanted))


_SHARED: dict[tuple[int, str], WorkerPool] = {}
_SHARED_LOCK = threading.Lock()


def shared_pool(key: str, argv: Sequence[str], size: int, **kwargs: Any) -> WorkerPool:
    """The pool named ``key`` of the current process, created on first use (a forked child gets its own)."""
    pid = os.getpid()
    with _SHARED_LOCK:
        pool = _SHARED.get((pid, key))
        if pool is None:
            pool = WorkerPool(argv, size, **kwargs)
            _SHARED[(pid, key)] = pool
        return pool


def close_shared_pools() -> None:
    """Kill the helpers of this process's shared pools (also run at interpreter exit)."""
    pid = os.getpid()
    with _SHARED_LOCK:
        mine = [k for k in _SHARED if k[0] == pid]
        pools = [_SHARED.pop(k) for k in mine]
    for pool in pools:
        pool.close()


atexit.register(close_shared_pools)
