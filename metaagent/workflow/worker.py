"""The sandbox worker: a process that runs workflow scripts, one at a time, under OS limits.

Started by :class:`metaagent.workflow.sandbox.SandboxPool` as ``python -m metaagent.workflow.worker FD``
with a connected Unix socket on file descriptor FD. Start-up imports everything a script can need, warms
RestrictedPython up, hardens the process and reports ``ready``; the host then reuses it for many scripts.

Per job (message ``run``): set RLIMIT_AS / RLIMIT_CPU for the job, compile the script with RestrictedPython
(cached by source), execute it with the guarded globals of :mod:`.guards` and the API of :mod:`.api`, and
answer ``done``. While the script runs, its agent and tool calls are messages to the host (``agents``,
``tool``), answered with text only: the worker never sees token ids or log-probs.

Hardening at start-up: no core files, no file writes (RLIMIT_FSIZE 0), few file descriptors, a low
recursion limit, when started as root a switch to the unprivileged ``nobody`` user so that
RLIMIT_NPROC = 0 forbids ``fork`` (the kernel does not apply RLIMIT_NPROC to root), and then the host's
isolation layer (``--isolation=JSON``, :mod:`metaagent.execution.isolation`): reads only the standard
library and the system libraries (never site-packages nor the ``metaagent`` package and its data: every
import happens before), no writes at all, no network, no shared memory, no new processes.
"""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import sys
import time
from typing import Any

from RestrictedPython import compile_restricted_exec

from metaagent.execution import _confine  # imported before the sandbox blocks imports
from metaagent.execution.process import memory_kb

from . import api
from .api import LimitReached, Submitted
from .channel import Channel, ChannelError, ProtocolError
from .guards import OutputLimit, PrintBudget, script_globals

#: deep enough for any sensible script, shallow enough that recursion never exhausts the C stack
RECURSION_LIMIT = 300
NOBODY_UID = 65534
MAX_OPEN_FILES = 32
COMPILE_CACHE_SIZE = 128
SCRIPT_FILENAME = "<script>"


def _harden(drop_privileges: bool, isolation: dict[str, Any] | None = None) -> dict[str, Any]:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_OPEN_FILES, MAX_OPEN_FILES))
    dropped = False
    if drop_privileges and os.geteuid() == 0:
        try:
            os.setgroups([])
            os.setgid(NOBODY_UID)
            os.setuid(NOBODY_UID)
            dropped = True
        except OSError:
            pass
    applied: dict[str, Any] | None = None
    if isolation:  # after the uid switch (it needs CAP_SETUID, which confine drops)
        applied = _confine.confine(**isolation)
    nproc_enforced = os.geteuid() != 0
    if nproc_enforced:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    sys.setrecursionlimit(RECURSION_LIMIT)
    return {"uid": os.getuid(), "dropped_privileges": dropped, "nproc_limited": nproc_enforced,
            "isolation": applied["layer"] if applied else "none"}  # fmt: skip


class Job:
    """One execution inside the worker: the runtime behind the API objects, and the script's outcome."""

    def __init__(self, channel: Channel, message: dict[str, Any]) -> None:
        self.channel = channel
        self.max_answer_chars = int(message["max_answer_chars"])
        self.submitted = False
        self.answer: str | None = None
        self.broken = False  # the channel may be out of step: retire the worker after this job

    # ---- api.Runtime ---------------------------------------------------------------------------------------
    def call_agents(self, calls: list[tuple[Any, str]]) -> list[tuple[str, str]]:
        if self.submitted:
            raise Submitted("the workflow already submitted its answer")
        payload = [
            {
                "role": agent.name,
                "system": agent.system_prompt,
                "history": agent._messages(),
                "message": message,
            }
            for agent, message in calls
        ]
        reply = self._request({"op": "agents", "calls": payload})
        replies = reply.get("replies")
        if not isinstance(replies, list) or len(replies) != len(calls):
            raise RuntimeError("the host answered an agent call with a malformed reply")
        return [(str(r["text"]), str(r["response"])) for r in replies]

    def call_tool(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        if self.submitted:
            raise Submitted("the workflow already submitted its answer")
        reply = self._request(
            {"op": "tool", "name": name, "args": list(args), "kwargs": kwargs}, what=f"{name}()"
        )
        return str(reply.get("value", ""))

    def submit(self, answer: str) -> None:
        if not self.submitted:
            if len(answer) > self.max_answer_chars:
                raise LimitReached(
                    f"the submitted answer has {len(answer)} characters; the limit is {self.max_answer_chars}",
                    kind="AnswerTooLarge",
                )
            self.submitted, self.answer = True, answer
        raise Submitted("the workflow submitted its answer")

    def _request(self, message: dict[str, Any], what: str = "the agent call") -> dict[str, Any]:
        try:
            self.channel.send(message)
        except (TypeError, ValueError, RecursionError):  # not JSON-serialisable (objects, cycles)
            raise TypeError(f"{what} accepts only text, numbers, lists and dicts as arguments") from None
        except ProtocolError as e:  # the frame limit: too large to send at all
            raise LimitReached(f"{what} is too large to send: {e}", kind="MessageTooLarge") from None
        except ChannelError:  # the host went away: nothing left to do
            os._exit(0)
        try:
            reply = self.channel.recv()
        except ChannelError:
            os._exit(0)
        except BaseException:  # e.g. MemoryError half-way through a frame: the channel may be out of step
            self.broken = True
            raise
        op = reply.get("op")
        if op == "stop":
            raise LimitReached(str(reply.get("reason", "the host stopped the workflow")))
        if op == "raise":
            kinds = {"TypeError": TypeError, "ValueError": ValueError}
            raise kinds.get(str(reply.get("type")), RuntimeError)(str(reply.get("message", "")))
        return reply


def _script_line(exc: BaseException) -> int | None:
    tb, line = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == SCRIPT_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _compile_line(error: str) -> int | None:
    m = re.match(r"Line (\d+)", error)
    return int(m.group(1)) if m else None


class Worker:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._cache: dict[str, Any] = {}

    def compile(self, source: str) -> tuple[Any, str | None, int | None]:
        """(code, error, line) of a script compiled with RestrictedPython."""
        if source in self._cache:
            return self._cache[source], None, None
        result = compile_restricted_exec(source, filename=SCRIPT_FILENAME)
        if result.errors or result.code is None:
            error = "; ".join(result.errors) or "the script could not be compiled"
            return None, error, _compile_line(error)
        if len(self._cache) >= COMPILE_CACHE_SIZE:
            self._cache.pop(next(iter(self._cache)))
        self._cache[source] = result.code
        return result.code, None, None

    def run(self, message: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        soft_as, hard_as = resource.getrlimit(resource.RLIMIT_AS)
        used_cpu = resource.getrusage(resource.RUSAGE_SELF)
        cpu_now = int(used_cpu.ru_utime + used_cpu.ru_stime)
        _, hard_cpu = resource.getrlimit(resource.RLIMIT_CPU)
        cpu_soft = cpu_now + int(message["cpu_seconds"])
        if hard_cpu != resource.RLIM_INFINITY:
            cpu_soft = min(cpu_soft, hard_cpu)
        memory = int(message["memory_mb"]) << 20
        if hard_as != resource.RLIM_INFINITY:
            memory = min(memory, hard_as)

        code, error, line = self.compile(message["source"])
        compile_s = time.perf_counter() - t0
        if code is None:
            return self._done(
                "invalid", error={"type": "CompileError", "message": error, "line": line}, compile_s=compile_s
            )

        job = Job(self.channel, message)
        budget = PrintBudget(int(message["max_output_chars"]))
        namespace = script_globals(budget)
        namespace.update(api.SCRIPT_API)
        namespace["task"] = str(message["task"])
        for name in message.get("tools", []):
            namespace[name] = _tool_stub(name)
        status, err, healthy = "ok", None, True
        api.bind_runtime(job)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_soft, hard_cpu))
        resource.setrlimit(resource.RLIMIT_AS, (memory, hard_as))
        try:
            exec(code, namespace)  # noqa: S102 - RestrictedPython-compiled, guarded globals: the point of the worker
        except Submitted:
            pass
        except OutputLimit as e:
            status, err = "limit", {"type": "OutputLimit", "message": str(e), "line": _script_line(e)}
        except LimitReached as e:
            status, err = "stopped", {"type": e.kind, "message": str(e), "line": _script_line(e)}
        except MemoryError as e:
            status, healthy = "limit", False
            err = {"type": "MemoryError", "message": f"the script exceeded its memory limit of {message['memory_mb']} MB",
                   "line": _script_line(e)}  # fmt: skip
        except Exception as e:  # noqa: BLE001 - whatever the script raised is its outcome
            status, err = (
                "error",
                {"type": type(e).__name__, "message": str(e)[:2000], "line": _script_line(e)},
            )
        except BaseException as e:  # noqa: BLE001 - anything else a script managed to raise: report it, retire
            status, healthy = "error", False
            err = {"type": type(e).__name__, "message": str(e)[:2000], "line": _script_line(e)}
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft_as, hard_as))
            api.bind_runtime(None)
        if job.submitted and status in ("error", "stopped"):
            status, err = (
                "ok",
                None,
            )  # the answer was in before the failure: what follows submit() does not count
        if budget.exceeded and status == "ok":
            status, err = (
                "limit",
                {
                    "type": "OutputLimit",
                    "message": f"the script printed more than {budget.max_chars} characters",
                    "line": None,
                },
            )
        namespace.clear()
        healthy = healthy and not job.broken
        return self._done(status, error=err, submitted=job.submitted, answer=job.answer, healthy=healthy,
                          compile_s=compile_s, run_s=time.perf_counter() - t0 - compile_s)  # fmt: skip

    @staticmethod
    def _done(status: str, **fields: Any) -> dict[str, Any]:
        out = {
            "op": "done",
            "status": status,
            "error": None,
            "submitted": False,
            "answer": None,
            "healthy": True,
        }
        out.update(fields)
        return out


def _tool_stub(name: str) -> Any:
    def tool(*args: Any, **kwargs: Any) -> str:
        return api._current().call_tool(name, args, kwargs)

    tool.__name__ = tool.__qualname__ = name
    return tool


def _warm_up(worker: Worker) -> None:
    """Compile and run a tiny script so the first real job finds every import and code path warm."""
    code, error, _ = worker.compile("x = [len(str(i)) for i in range(3)]\nprint(x)\ny = f'{x}'\n")
    assert code is not None, error
    exec(code, script_globals(PrintBudget(100)))  # noqa: S102 - our own constant script


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    sock = socket.socket(fileno=int(argv[0]))
    channel = Channel(sock)
    try:
        worker = Worker(channel)
        _warm_up(worker)
        info: dict[str, Any] = memory_kb()  # before the uid switch: /proc/self is then unreadable
        isolation = next((json.loads(a.split("=", 1)[1]) for a in argv if a.startswith("--isolation=")), None)
        info.update(_harden(drop_privileges="--no-drop-privileges" not in argv, isolation=isolation))
    except BaseException as e:  # noqa: BLE001 - tell the host why start-up failed
        channel.send({"op": "fatal", "error": f"{type(e).__name__}: {e}"})
        raise SystemExit(1) from None
    channel.send({"op": "ready", "pid": os.getpid(), **info})
    while True:
        try:
            message = channel.recv()
        except ChannelError:
            return  # the host went away
        op = message.get("op")
        if op == "exit":
            return
        if op == "run":
            try:
                channel.send(worker.run(message))
            except ChannelError:
                return
        elif op == "ping":
            channel.send({"op": "pong"})


if __name__ == "__main__":
    main()
