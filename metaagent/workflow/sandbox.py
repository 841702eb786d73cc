"""Run workflow scripts in a pool of sandboxed worker processes.

    execution = run_script(source, task, policy, {"timeout_s": 10})
    execution.status, execution.answer, execution.turns, execution.error

How a script runs (host = the process that owns the policy; worker = :mod:`metaagent.workflow.worker`):

1. the host checks the script (:func:`~metaagent.workflow.check_script`; refused scripts end as ``invalid``
   without running);
2. a worker from the pool compiles it with RestrictedPython and executes it with guarded builtins and
   attribute access (:mod:`.guards`);
3. each agent call is a JSON message to the host, which calls ``policy.generate`` (one batch per
   ``parallel``), records the turn with token ids and log-probs, and answers with text only;
4. the worker reports how the script ended; the host builds the
   :class:`~metaagent.records.Execution`.

What is covered (each is a test in ``tests/workflow``):

- escapes through the language: dunder and private names/attributes, ``str.format`` and f-string attribute
  tricks, generator/frame/traceback attributes, ``getattr``/``eval``/``exec``/``open``/``__import__``,
  imports, the builtins dict, rebinding guard names (including positional-only parameters). Refused by the
  checker, by RestrictedPython's compiler, and by the run-time attribute allow-list (three layers);
- resources: endless loops and huge computations (``10**10**8``) end at the host's wall clock, which kills
  the worker (status ``timeout``, within ``timeout_s`` plus the kill); RLIMIT_CPU backs it up; huge
  allocations hit RLIMIT_AS (``limit``, MemoryError); deep recursion hits a low recursion limit
  (``error``); printing is capped (``limit``); agent calls, generated tokens, tool calls, message and
  answer sizes are capped by the host (``limit``);
- process escapes: no module can be imported, there is no ``fork``; when the host runs as root the
  worker switches to ``nobody`` so that RLIMIT_NPROC = 0 also makes fork fail at the OS level; no file
  writes (RLIMIT_FSIZE = 0) and no core dumps;
- the kernel layer (:mod:`metaagent.execution.isolation`, ``execution.isolation``): after the uid switch
  each worker confines itself: Landlock reads only of the standard library and system libraries (not
  site-packages, not the ``metaagent`` package and its data), no writes, no TCP, no signals out (or
  read-only mounts under the ``namespaces`` layer), empty network and IPC namespaces where the kernel
  allows them, no capabilities, and a seccomp filter (no new processes, no execve, no sockets, no
  io_uring, no memfd / System V / POSIX shared memory); the layer is in the worker's ``ready`` message
  (``worker_info()``);
- host safety: the host never unpickles or executes anything from a worker (JSON frames with a size
  cap); a worker that dies, hangs or talks nonsense is killed and replaced; other executions continue.

Capacity (measured with ``benchmarks/sandbox.py`` on 2 shared CPU cores): an idle worker holds ~15 MB RSS
(~18 MB address space); starting one takes ~75-100 ms; the sandbox adds a median 5-8 ms per script seen
for the first time (libcst check ~2.5 ms, RestrictedPython compile + run ~1.5-4 ms) and 2 workers run
~160-235 short scripts/s. One execution per worker keeps a kill
local to one script; at ~15 MB a worker, 64 executions in flight cost ~1 GB, so the default is workers =
executions in flight, and several executions per worker is not implemented.

What is NOT covered:

- this is not a security boundary against a determined attacker with a CPython or RestrictedPython
  exploit (a bug in the interpreter's C code, or in RestrictedPython's transformer). Workers run without
  privileges only when the host is root; they share the host's kernel (a kernel exploit is not
  covered). Run training in a container or VM that holds nothing you could not lose;
- side channels (timing, CPU contention between scripts);
- memory limits are address-space limits (RLIMIT_AS), not cgroup limits; the pool's total memory is
  ``workers x memory_mb`` at worst;
- tools run on the host with their own isolation (``metaagent.execution.code`` runs programs in short-lived
  limited processes), not inside this sandbox.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from metaagent.data.tasks import Task
from metaagent.errors import MetaAgentError
from metaagent.execution import isolation
from metaagent.execution.process import kill_process, memory_kb
from metaagent.policy.base import Policy, SamplingParams
from metaagent.records import Execution, ScriptError

from . import rules
from .channel import Channel, ChannelError
from .limits import Limits
from .session import Session, executor_sampling

#: the package root, put on the worker's PYTHONPATH so it imports the same code as the host (a confined
#: worker reads none of it: it imports everything before it confines itself)
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
STARTUP_TIMEOUT_S = 60.0


class SandboxError(MetaAgentError, RuntimeError):
    """The sandbox itself failed (a worker could not start); never a script's fault."""


def task_text(task: Task | Mapping[str, Any] | str) -> str:
    """The text a script sees as ``task``: the question of a Task, or the string itself."""
    if isinstance(task, str):
        if not task.strip():
            raise ValueError("the task text is empty")
        return task
    return Task.coerce(task).question


class _SandboxWorker:
    """A worker process and the host's end of its channel."""

    def __init__(self, python: str, drop_privileges: bool, startup_timeout_s: float) -> None:
        host_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONHASHSEED": "0",  # set iteration order and str hashing identical in every worker: reproducible runs
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (_PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")) if p),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
        }
        argv = [python, "-s", "-m", "metaagent.workflow.worker", str(worker_end.fileno())]
        if not drop_privileges:
            argv.append("--no-drop-privileges")
        confine = isolation.active().child_spec(None)
        if confine is not None:
            argv.append("--isolation=" + json.dumps(confine))
        try:
            self.proc = subprocess.Popen(
                argv,
                pass_fds=(worker_end.fileno(),),
                env=env,
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: a kill reaches anything it might start
                close_fds=True,
            )
        except OSError as e:
            host_end.close()
            raise SandboxError(f"cannot start a sandbox worker with {python!r}: {e}") from e
        finally:
            worker_end.close()
        self.channel = Channel(host_end)
        self.jobs = 0
        try:
            hello = self.channel.recv(timeout=startup_timeout_s)
        except ChannelError as e:
            self.kill()
            raise SandboxError(
                f"a sandbox worker did not start ({e}); check that `{python} -m metaagent.workflow.worker` "
                "can import RestrictedPython and metaagent"
            ) from None
        if hello.get("op") != "ready":
            self.kill()
            raise SandboxError(f"a sandbox worker failed to start: {hello.get('error', hello)}")
        self.info = hello

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> int | None:
        code = kill_process(self.proc, wait_s=None)
        self.channel.close()
        return code

    def wait_exit(self, timeout: float = 2.0) -> int | None:
        """The exit code of a worker whose channel broke (killed if it lingers)."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return self.kill()
        self.channel.close()
        return code

    def stop(self) -> None:
        try:
            self.channel.send({"op": "exit"}, timeout=1.0)
            self.proc.wait(timeout=1.0)
        except (ChannelError, subprocess.TimeoutExpired, OSError):
            pass
        self.kill()

    def memory_kb(self) -> dict[str, int]:
        """VmRSS / VmSize of the worker process (Linux)."""
        return memory_kb(self.proc.pid)


def _kill_all(workers: list[_SandboxWorker]) -> None:
    for w in list(workers):
        try:
            w.kill()
        except OSError:  # already gone
            pass


class SandboxPool:
    """A pool of sandbox worker processes; :meth:`run` is safe to call from many threads at once.

    Each worker runs one execution at a time (so ``workers`` bounds the executions in flight; callers
    beyond that wait for a free worker). Workers start lazily (or all at once with :meth:`warm`) and are
    reused; a worker that was killed (timeout, crash) or is unhealthy (MemoryError) is replaced by a fresh
    one on demand.

    Args:
        workers: number of worker processes.
        limits: default :class:`Limits` (or a dict of fields) for executions that pass none.
        max_jobs_per_worker: a worker is retired after this many executions (bounds memory growth).
        drop_privileges: when the host runs as root, switch workers to ``nobody`` (enables RLIMIT_NPROC).
        python: interpreter for the workers (default: the host's).
        startup_timeout_s: how long a worker may take to start.
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        limits: Limits | Mapping[str, Any] | None = None,
        max_jobs_per_worker: int = 1000,
        drop_privileges: bool = True,
        python: str | None = None,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
    ) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        if not isinstance(max_jobs_per_worker, int) or max_jobs_per_worker < 1:
            raise ValueError(f"max_jobs_per_worker must be a positive integer, got {max_jobs_per_worker!r}")
        self.workers = workers
        self.limits = Limits.coerce(limits)
        self.max_jobs_per_worker = max_jobs_per_worker
        self.drop_privileges = drop_privileges
        self.python = python or sys.executable
        self.startup_timeout_s = startup_timeout_s
        self._cond = threading.Condition()
        self._idle: list[_SandboxWorker] = []
        self._all: list[_SandboxWorker] = []
        self._starting = 0
        self._closed = False
        self.counters = {"started": 0, "replaced": 0, "executions": 0}
        self._finalizer = weakref.finalize(self, _kill_all, self._all)

    # ---- workers ------------------------------------------------------------------------------------------
    def _acquire(self) -> _SandboxWorker:
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxError("the sandbox pool is closed")
                while self._idle:
                    worker = self._idle.pop()
                    if worker.alive():
                        return worker
                    self._all.remove(worker)
                    self.counters["replaced"] += 1
                if len(self._all) + self._starting < self.workers:
                    self._starting += 1
                    break
                self._cond.wait()
        return self._spawn_reserved()

    def _spawn_reserved(self) -> _SandboxWorker:
        """Start a worker for a slot already reserved in ``_starting``."""
        try:
            worker = _SandboxWorker(self.python, self.drop_privileges, self.startup_timeout_s)
        except BaseException:
            with self._cond:
                self._starting -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._starting -= 1
            self._all.append(worker)
            self.counters["started"] += 1
        return worker

    def _release(self, worker: _SandboxWorker, healthy: bool) -> None:
        worker.jobs += 1
        keep = healthy and not self._closed and worker.jobs < self.max_jobs_per_worker and worker.alive()
        if not keep:
            if healthy:
                worker.stop()
            else:
                worker.kill()
        with self._cond:
            if keep:
                self._idle.append(worker)
            else:
                self._all.remove(worker)
                self.counters["replaced"] += 1
            self._cond.notify()

    def warm(self) -> None:
        """Start every worker now (otherwise they start on first use)."""
        while True:
            with self._cond:
                if self._closed or len(self._all) + self._starting >= self.workers:
                    return
                self._starting += 1
            worker = self._spawn_reserved()
            with self._cond:
                self._idle.append(worker)
                self._cond.notify()

    def worker_memory_kb(self) -> list[dict[str, int]]:
        """VmRSS / VmSize of every live worker (for capacity planning)."""
        with self._cond:
            workers = list(self._all)
        return [w.memory_kb() for w in workers]

    def worker_info(self) -> list[dict[str, Any]]:
        """What each worker reported at start-up (pid, uid, whether privileges were dropped, ...)."""
        with self._cond:
            return [dict(w.info) for w in self._all]

    # ---- executions ---------------------------------------------------------------------------------------
    def run(
        self,
        source: str,
        task: Task | Mapping[str, Any] | str,
        policy: Policy,
        limits: Limits | Mapping[str, Any] | None = None,
        *,
        sampling: SamplingParams | Mapping[str, Any] | None = None,
        tools: Mapping[str, Callable[..., str]] | None = None,
        seed: int | None = None,
        check: bool = True,
        index: int = 0,
        branching: Any = None,
    ) -> Execution:
        """Execute a workflow script and return its :class:`Execution` record.

        Args:
            source: the script (already extracted from designer text).
            task: a :class:`Task` (the script sees its question) or the task text.
            policy: serves every agent call (one ``generate`` per agent call or ``parallel``).
            limits: :class:`Limits` or a dict of some of its fields; the pool's defaults otherwise.
            sampling: the executor's sampling (default temperature 1.0, max_tokens 512); ``</delivery>`` is
                always a stop string.
            tools: host functions the script may call by name (e.g. ``default_tools(task)``).
            seed: makes the execution reproducible: agent call k is sampled with a seed derived from
                (seed, k).
            check: run :func:`check_script` first (set False only to test the sandbox's own defences,
                or when the caller has checked this exact script with the same tool names).
            index: stored as ``Execution.index``.
            branching: a :class:`~metaagent.workflow.branching.Brancher` for tree sampling (AT-GRPO), or None.

        Raises:
            TypeError / ValueError for malformed arguments; whatever ``policy.generate`` raises for host-side
            failures (e.g. :class:`~metaagent.policy.PolicyError` when a model server is down), except
            :class:`~metaagent.policy.RequestError`, which ends the execution as ``error``. Everything the
            script does ends up in the returned record.
        """
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must be a metaagent Policy, got {type(policy).__name__}")
        text = task_text(task)
        limits = Limits.coerce(limits, self.limits)
        tools = _validate_tools(tools)
        params = executor_sampling(sampling)
        start = time.monotonic()
        if not isinstance(source, str):
            return _invalid(
                index,
                seed,
                start,
                ScriptError("CheckError", f"the script must be text, got {type(source).__name__}", 1),
            )
        if check:
            from .checker import check_script

            report = check_script(source, tool_names=tuple(tools))
            if not report.ok:
                first = report.errors[0]
                message = "; ".join(str(d) for d in report.errors)
                return _invalid(index, seed, start, ScriptError("CheckError", message, first.line))
        session = Session(source, text, policy, limits, params, tools, seed, index, branching=branching)
        worker = self._acquire()
        started = time.monotonic()
        healthy = False
        try:
            healthy = session.drive(worker)
        finally:
            self._release(worker, healthy)
        with self._cond:
            self.counters["executions"] += 1
        return session.execution(time.monotonic() - started)

    def close(self) -> None:
        """Stop all workers. Executions still running finish; their workers are then stopped."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            for w in idle:
                self._all.remove(w)
            self._cond.notify_all()
        for w in idle:
            w.stop()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _invalid(index: int, seed: int | None, start: float, error: ScriptError) -> Execution:
    return Execution(
        index=index, status="invalid", error=error, seed=seed, elapsed_s=time.monotonic() - start
    )


def _validate_tools(tools: Mapping[str, Callable[..., str]] | None) -> dict[str, Callable[..., str]]:
    if tools is None:
        return {}
    if not isinstance(tools, Mapping):
        raise TypeError(f"tools must be a mapping of name -> function, got {type(tools).__name__}")
    reserved = rules.reserved_names(()) | set(rules.FORBIDDEN_NAMES)
    out = {}
    for name, fn in tools.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_") or name in reserved:
            raise ValueError(
                f"tool name {name!r} is not usable: it must be an identifier that does not start with '_' and is not "
                "a name of the workflow API or the builtins"
            )
        if not callable(fn):
            raise TypeError(f"tool {name!r} must be callable, got {type(fn).__name__}")
        out[name] = fn
    return out


# ---- the module-level default pool ----------------------------------------------------------------------

_default_pool: SandboxPool | None = None
_default_lock = threading.Lock()


def default_pool() -> SandboxPool:
    """The pool :func:`run_script` uses, created on first use (``min(8, cpu count)`` workers, at least 2)."""
    global _default_pool
    with _default_lock:
        if _default_pool is None or _default_pool._closed:
            _default_pool = SandboxPool(workers=max(2, min(8, os.cpu_count() or 2)))
            atexit.register(_default_pool.close)
        return _default_pool


def run_script(
    source: str,
    task: Task | Mapping[str, Any] | str,
    policy: Policy,
    limits: Limits | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Execution:
    """Run a workflow script in the default sandbox pool; see :meth:`SandboxPool.run` for the arguments."""
    return default_pool().run(source, task, policy, limits, **kwargs)
