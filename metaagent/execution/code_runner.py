"""Run one program on one test case in a separate, limited process and classify what happened.

Each run gets a fresh temporary directory (its cwd), a clean environment (no inherited variables, so no
secrets), stdin from the test, stdout/stderr to files capped by ``RLIMIT_FSIZE``, an address-space limit,
a CPU-time limit and a generous wall-clock limit, and the isolation layer of
:mod:`metaagent.execution.isolation` (applied by the child before the program runs). The process starts
its own session; when it ends (or on timeout) the whole process group is killed, so anything it started
dies with it. The child side is :mod:`metaagent.execution._code_harness`.

Time: ``time_limit_s`` is CPU time (user + system of the process and its threads, read from ``wait4``'s
resource usage), so a correct program is not failed because other tests were competing for the cores;
``RLIMIT_CPU`` stops a busy program one second after it, and the wall clock (``wall_factor`` x the limit,
at least the limit + 1 s) stops a program that sleeps or blocks.

Statuses: ``passed``, ``wrong_answer`` (includes output over the size cap and failed assertions),
``runtime_error``, ``timeout`` (CPU or wall-clock limit), ``memory`` (address-space limit).
"""

from __future__ import annotations

import ast
import json
import os
import select
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .code_tests import TestSuite, call_result_matches, outputs_match
from .errors import RunnerError
from .isolation import CHILD_DIR, active
from .process import kill_group

TEST_STATUSES = ("passed", "wrong_answer", "runtime_error", "timeout", "memory", "skipped")

HARNESS = str(Path(__file__).with_name("_code_harness.py"))
CLIP_CHARS = 400
CLEAN_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONHASHSEED": "0",
}


@dataclass(frozen=True)
class Limits:
    """Per-test limits. ``time_limit_s`` is CPU seconds; the wall clock allows ``wall_factor`` times as much
    (at least 1 s more). ``max_output_bytes`` caps stdout (longer output is cut and fails the test)."""

    time_limit_s: float = 4.0
    memory_mb: int = 1024
    max_output_bytes: int = 16 << 20
    python: str = sys.executable
    site_packages: bool = False  # False: ``python -S`` (stdlib only, ~25 ms faster start per test)
    wall_factor: float = 3.0

    @property
    def wall_limit_s(self) -> float:
        return max(self.time_limit_s * self.wall_factor, self.time_limit_s + 1.0)

    def __post_init__(self) -> None:
        if not self.wall_factor >= 1:
            raise ValueError(f"wall_factor must be >= 1, got {self.wall_factor}")
        if not self.time_limit_s > 0:
            raise ValueError(f"time_limit_s must be > 0, got {self.time_limit_s}")
        if self.memory_mb < 64:
            raise ValueError(
                f"memory_mb must be >= 64 (the interpreter itself needs ~30 MB), got {self.memory_mb}"
            )
        if self.max_output_bytes < 1024:
            raise ValueError(f"max_output_bytes must be >= 1024, got {self.max_output_bytes}")


@dataclass
class TestOutcome:
    """What happened on one test. Texts are clipped to a few hundred characters for display."""

    index: int
    status: str  # one of TEST_STATUSES
    elapsed_s: float = 0.0
    cpu_s: float = 0.0
    input: str = ""
    expected: str = ""
    actual: str = ""
    error: str = ""
    output_truncated: bool = False

    __test__ = False

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def clip(value: Any, limit: int = CLIP_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}...[{len(text) - limit} chars cut]...{text[-half:]}"


def _read(path: Path, limit: int) -> tuple[str, bool]:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        return "", False
    return data[:limit].decode("utf-8", "replace"), len(data) > limit


def run_test_case(program: str, suite: TestSuite, index: int, limits: Limits) -> TestOutcome:
    """Run ``program`` on ``suite.cases[index]`` and classify the outcome.

    Raises :class:`RunnerError` only when the runner itself fails (cannot create files or start Python);
    everything the program does is a status.
    """
    case = suite.cases[index]
    shown_input = clip(case.input) if suite.kind != "assert" else clip(suite.source)
    outcome = TestOutcome(
        index,
        "runtime_error",
        input=shown_input,
        expected=clip(case.expected) if suite.kind != "assert" else "all assertions hold",
    )
    workdir = Path(tempfile.mkdtemp(prefix="metaagent-test-"))
    start = time.monotonic()
    try:
        nonce = secrets.token_hex(16)
        spec: dict[str, Any] = {
            "mode": suite.kind,
            "program": "program.py",
            "result": "result.txt",
            "nonce": nonce,
            "memory_bytes": limits.memory_mb << 20,
            "cpu_seconds": max(1, int(limits.time_limit_s + 1.999)),
            "file_bytes": limits.max_output_bytes + 1,
            "isolation": active().child_spec(str(workdir)),
            "confine_dir": CHILD_DIR,
        }
        if suite.kind == "call":
            spec.update(fn_name=suite.fn_name, args=case.input)
        elif suite.kind == "assert":
            spec.update(test_source=suite.source, entry_point=suite.entry_point)
        (workdir / "program.py").write_text(program, encoding="utf-8")
        # the spec is a Python literal: the child reads it without importing json (start-up time)
        (workdir / "spec.txt").write_text(repr(spec), encoding="utf-8")
        (workdir / "stdin.txt").write_text(case.input if suite.kind == "stdio" else "", encoding="utf-8")
        argv = [limits.python, "-I", "-B"] + ([] if limits.site_packages else ["-S"]) + [HARNESS, "spec.txt"]
        env = dict(CLEAN_ENV, HOME=str(workdir), TMPDIR=str(workdir))
        with (
            open(workdir / "stdin.txt", "rb") as fin,
            open(workdir / "stdout.txt", "wb") as fout,
            open(workdir / "stderr.txt", "wb") as ferr,
        ):
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=workdir,
                    env=env,
                    stdin=fin,
                    stdout=fout,
                    stderr=ferr,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as e:
                raise RunnerError(f"cannot start {limits.python!r} for a code test: {e}") from e
            timed_out, returncode, outcome.cpu_s = _wait_cpu(proc, limits.wall_limit_s)
            kill_group(proc.pid)  # descendants that outlived the program
        outcome.elapsed_s = time.monotonic() - start
        stdout, truncated = _read(workdir / "stdout.txt", limits.max_output_bytes)
        stderr, _ = _read(workdir / "stderr.txt", 8192)
        result = _read_result(workdir / "result.txt", nonce)
        outcome.actual = clip(stdout)
        outcome.output_truncated = truncated
        _classify(outcome, suite, index, limits, timed_out, returncode, result, stdout, stderr)
        return outcome
    except OSError as e:
        raise RunnerError(f"code runner failed to prepare or read a test directory: {e}") from e
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_cpu(proc: subprocess.Popen, wall_s: float) -> tuple[bool, int, float]:
    """Wait for ``proc`` at most ``wall_s`` seconds (then kill its group); returns (timed out, return code,
    CPU seconds it used). Waits on a pidfd and reaps with ``wait4`` (no polling); without pidfds, polls."""
    timed_out = False
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None:
        try:
            if not select.select([pidfd], [], [], wall_s)[0]:
                timed_out = True
                kill_group(proc.pid)
        finally:
            os.close(pidfd)
    else:
        try:
            proc.wait(timeout=wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc.pid)
    if proc.returncode is None:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        return timed_out, proc.returncode, usage.ru_utime + usage.ru_stime
    return timed_out, proc.returncode, 0.0  # reaped by the fallback: CPU time unknown, the wall clock ruled


def _literal(text: str) -> Any:
    """``ast.literal_eval`` (never runs code); raises ValueError for anything that is not a literal."""
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
        raise ValueError(str(e)) from None


def _json_value(shown: str) -> Any:
    """The call's return value as the JSON value it would serialise to (tuples -> lists, keys -> strings);
    a value with no literal ``repr`` (an object, ``nan``) stays its ``repr`` string."""
    try:
        value = _literal(shown)
    except ValueError:
        return shown
    try:
        return json.loads(json.dumps(value, default=repr))
    except (ValueError, TypeError, RecursionError):
        return shown


def _read_result(path: Path, nonce: str) -> dict[str, Any] | None:
    try:
        data = _literal(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("nonce") != nonce:
        return None  # absent, or written by the program itself
    return data


def _classify(
    outcome: TestOutcome,
    suite: TestSuite,
    index: int,
    limits: Limits,
    timed_out: bool,
    returncode: int,
    result: dict[str, Any] | None,
    stdout: str,
    stderr: str,
) -> None:
    def status(name: str, error: str = "") -> None:
        outcome.status, outcome.error = name, clip(error, 1000)

    if result and result.get("status") == "isolation":
        raise RunnerError(f"the isolation layer could not be applied to a test program: {result.get('error')}")
    if timed_out:
        return status("timeout", f"wall-clock limit of {limits.wall_limit_s:g}s exceeded")
    if returncode == -signal.SIGXCPU or outcome.cpu_s > limits.time_limit_s:
        return status("timeout", f"CPU time limit of {limits.time_limit_s:g}s exceeded ({outcome.cpu_s:.2f}s used)")
    if (
        outcome.output_truncated
        or (result and result.get("status") == "output_limit")
        or (returncode < 0 and -returncode == signal.SIGXFSZ)
    ):
        outcome.output_truncated = True
        return status("wrong_answer", f"output exceeded {limits.max_output_bytes} bytes and was cut")
    if result is None:
        if "MemoryError" in stderr:
            return status("memory", f"address-space limit of {limits.memory_mb} MB exceeded")
        if returncode < 0:
            name = (
                signal.Signals(-returncode).name
                if -returncode in signal.valid_signals()
                else str(-returncode)
            )
            return status("runtime_error", f"the program was killed by {name}\n{stderr}")
        if suite.kind == "stdio" and returncode == 0:  # exited on its own (os._exit): judge what it printed
            return (
                status("passed")
                if outputs_match(stdout, suite.cases[index].expected)
                else status("wrong_answer")
            )
        return status(
            "runtime_error", f"the program exited (code {returncode}) before the test finished\n{stderr}"
        )
    kind = result.get("status")
    if kind == "memory":
        return status("memory", f"address-space limit of {limits.memory_mb} MB exceeded")
    if kind == "assertion":
        return status("wrong_answer", result.get("error", ""))
    if kind != "ok":
        return status("runtime_error", result.get("error", "") or stderr)
    if suite.kind == "stdio":
        ok = outputs_match(stdout, suite.cases[index].expected)
    elif suite.kind == "call":
        value = _json_value(str(result.get("value", "None")))
        outcome.actual = clip(value)
        ok = call_result_matches(value, suite.cases[index].expected)
    else:
        ok = True
    return status("passed") if ok else status("wrong_answer")
