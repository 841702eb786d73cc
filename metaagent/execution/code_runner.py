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

Verdicts are decided outside the program's process: the parent compares stdout and call results (read
back as plain data, :mod:`._plain`); an assert test runs in a second, judge process that calls the
program's functions through a pipe (:mod:`._code_harness`). What the runner sees a program try against
its sandbox is counted per test (:data:`SANDBOX_COUNTERS`).

Statuses: ``passed``, ``wrong_answer`` (includes output over the size cap and failed assertions),
``runtime_error``, ``timeout`` (CPU or wall-clock limit, or the caller's deadline), ``memory``
(address-space limit, or the memory cgroup's).
"""

from __future__ import annotations

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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._plain import NotPlain
from ._plain import parse as parse_plain
from .code_tests import TestSuite, call_result_matches, outputs_match
from .errors import RunnerError
from . import cgroup
from .isolation import CHILD_DIR, active, cgroup_slots
from .process import WALL_FACTOR, kill_group, kill_process

TEST_STATUSES = ("passed", "wrong_answer", "runtime_error", "timeout", "memory", "skipped")
#: what the runner saw a program do to its sandbox, per test (reward details; all counts):
#: forged_result - the program wrote its own result channel (a wrong nonce or no literal);
#: non_plain_value - a returned value that is not plain data (an object, e.g. one equal to everything);
#: early_exit - the program stopped while an assert test's judge waited for a call's result;
#: oom_kill - the kernel stopped the program at its memory cgroup's limit
SANDBOX_COUNTERS = ("sandbox/forged_result", "sandbox/non_plain_value", "sandbox/early_exit", "sandbox/oom_kill")
#: RLIMIT_NOFILE of a test program: bounds the pipes, socket pairs and event descriptors it can hold
OPEN_FILES = 64
#: RLIMIT_CPU of an assert test's judge (the task's own test code, not the program); never below the wall
#: clock, so that answers which keep the judge busy end as a timeout of the test, not as a dead judge
JUDGE_CPU_S = 60

HARNESS = str(Path(__file__).with_name("_code_harness.py"))
CLIP_CHARS = 400
CLEAN_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONHASHSEED": "0",
}


@dataclass(frozen=True)
class CaseLimits:
    """Per-test limits. ``time_limit_s`` is CPU seconds; the wall clock allows ``wall_factor`` times as much
    (at least 1 s more). ``max_output_bytes`` caps stdout (longer output is cut and fails the test)."""

    time_limit_s: float = 4.0
    memory_mb: int = 1024
    max_output_bytes: int = 16 << 20
    python: str = sys.executable
    site_packages: bool = False  # False: ``python -S`` (stdlib only, ~25 ms faster start per test)
    wall_factor: float = WALL_FACTOR

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
    sandbox: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SANDBOX_COUNTERS, 0))

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


def run_test_case(
    program: str, suite: TestSuite, index: int, limits: CaseLimits, *, deadline: float | None = None
) -> TestOutcome:
    """Run ``program`` on ``suite.cases[index]`` and classify the outcome.

    ``deadline`` (a ``time.monotonic()`` time) cuts the wall clock short: a test that cannot start before
    it is a ``timeout`` without running. Raises :class:`RunnerError` only when the runner itself fails
    (cannot create files or start Python, the isolation layer or an assert test's judge failed);
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
    wall_s = limits.wall_limit_s
    if deadline is not None:
        wall_s = min(wall_s, deadline - time.monotonic())
        if wall_s <= 0:
            outcome.status, outcome.error = "timeout", "the execution's time budget ran out before this test"
            return outcome
    iso = active()
    slots = cgroup_slots()
    slot = kills = None
    workdirs = [Path(tempfile.mkdtemp(prefix="metaagent-test-"))]
    start = time.monotonic()
    try:
        if slots is not None:  # memory the address-space limit does not see: tmpfs pages, kernel buffers
            slot, kills = slots.acquire((limits.memory_mb + iso.scratch_mb) << 20, iso.max_tasks)
        spec = _spec(workdirs[0], limits, iso)
        if suite.kind == "call":
            spec.update(mode="call", fn_name=suite.fn_name, args=case.input)
        stdin = case.input if suite.kind == "stdio" else ""
        if suite.kind != "assert":
            procs = [_start(workdirs[0], dict(spec, mode=suite.kind), program, stdin, limits, slot=slot)]
        else:  # the program answers calls; a judge the program cannot reach runs the test (see _code_harness)
            procs = _start_served_and_judge(workdirs, spec, program, suite, limits, iso, slot)
        waited = _wait(procs, wall_s, stop_with=procs[1] if len(procs) > 1 else None)
        if slot is not None:
            outcome.sandbox["sandbox/oom_kill"] = int(slots.release(slot, kills))
            slot = None
        outcome.elapsed_s = time.monotonic() - start
        _judge_outcome(outcome, suite, limits, wall_s, workdirs, procs, waited)
        return outcome
    except OSError as e:
        raise RunnerError(f"code runner failed to prepare or read a test directory: {e}") from e
    finally:
        if slot is not None:
            slots.release(slot, kills)
        for workdir in workdirs:
            shutil.rmtree(workdir, ignore_errors=True)


def _start_served_and_judge(
    workdirs: list[Path],
    spec: dict[str, Any],
    program: str,
    suite: TestSuite,
    limits: CaseLimits,
    iso: Any,
    slot: cgroup.Slot | None,
) -> list[_Started]:
    """An assert test's two processes: the program serving calls in ``workdirs[0]`` and the judge (in a new
    workdir, appended to ``workdirs``) running the test source against it over two pipes."""
    workdirs.append(Path(tempfile.mkdtemp(prefix="metaagent-judge-")))
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    procs: list[_Started] = []
    try:
        served = dict(spec, mode="serve", requests_fd=requests_r, answers_fd=answers_w)
        procs.append(_start(workdirs[0], served, program, "", limits, (requests_r, answers_w), slot=slot))
        judge = dict(_spec(workdirs[1], limits, iso), mode="judge", program=None,
                     test_source=suite.source, entry_point=suite.entry_point,
                     requests_fd=requests_w, answers_fd=answers_r,
                     cpu_seconds=max(JUDGE_CPU_S, int(limits.wall_limit_s) + 2))  # fmt: skip
        # the judge runs the task's test code (a served client's code): it shares the program's memory cgroup
        procs.append(_start(workdirs[1], judge, None, "", limits, (requests_w, answers_r), slot=slot))
    except BaseException:
        for proc in procs:
            kill_process(proc)
        raise
    finally:
        for fd in (requests_r, requests_w, answers_r, answers_w):
            os.close(fd)
    return procs


def _judge_outcome(
    outcome: TestOutcome,
    suite: TestSuite,
    limits: CaseLimits,
    wall_s: float,
    workdirs: list[Path],
    procs: list[_Started],
    waited: list[tuple[bool, int, float]],
) -> None:
    """Read what the finished processes left in their workdirs and classify the test into ``outcome``."""
    timed_out, returncode, outcome.cpu_s = waited[0]
    stdout, truncated = _read(workdirs[0] / "stdout.txt", limits.max_output_bytes)
    stderr, _ = _read(workdirs[0] / "stderr.txt", 8192)
    result = _read_result(workdirs[0] / "result.txt", procs[0].nonce, outcome)
    outcome.actual = clip(stdout)
    outcome.output_truncated = truncated
    if wall_s < limits.wall_limit_s and (timed_out or any(w[0] for w in waited)):
        outcome.status = "timeout"
        outcome.error = f"stopped at the execution's time budget ({wall_s:.1f} s left)"
        return
    if suite.kind == "assert":
        judged = _read_result(workdirs[1] / "result.txt", procs[1].nonce, None)
        judge_err, _ = _read(workdirs[1] / "stderr.txt", 8192)
        _classify_assert(outcome, limits, waited, result, judged, stderr, judge_err)
    else:
        _classify(outcome, suite, outcome.index, limits, timed_out, returncode, result, stdout, stderr)


def _spec(workdir: Path, limits: CaseLimits, iso: Any) -> dict[str, Any]:
    """The harness spec both processes of a test share (mode and test data are added by the caller)."""
    return {
        "program": "program.py",
        "result": "result.txt",
        "nonce": secrets.token_hex(16),
        "memory_bytes": limits.memory_mb << 20,
        "cpu_seconds": max(1, int(limits.time_limit_s + 1.999)),
        "file_bytes": limits.max_output_bytes + 1,
        "open_files": OPEN_FILES,
        "isolation": iso.child_spec(str(workdir), site_packages=limits.site_packages),
        "confine_dir": CHILD_DIR,
    }


class _Started(subprocess.Popen):
    nonce: str = ""


def _start(
    workdir: Path,
    spec: dict[str, Any],
    program: str | None,
    stdin: str,
    limits: CaseLimits,
    fds: tuple[int, ...] = (),
    slot: cgroup.Slot | None = None,
) -> _Started:
    """Write the files of one harness process into ``workdir`` and start it (its own session). ``slot``:
    move it into that memory cgroup while its interpreter starts (the move waits for an RCU grace period,
    ~10 ms; the harness waits for the go on ``go_fd`` before it runs anything of the program)."""
    go_r, go_w = os.pipe() if slot is not None else (None, None)
    try:
        if go_r is not None:
            spec, fds = dict(spec, go_fd=go_r), (*fds, go_r)
        if program is not None:
            (workdir / "program.py").write_text(program, encoding="utf-8")
        # the spec is a Python literal: the child reads it without importing json (start-up time)
        (workdir / "spec.txt").write_text(repr(spec), encoding="utf-8")
        (workdir / "stdin.txt").write_text(stdin, encoding="utf-8")
        site = limits.site_packages and spec["mode"] != "judge"
        argv = [limits.python, "-I", "-B"] + ([] if site else ["-S"]) + [HARNESS, "spec.txt"]
        env = dict(CLEAN_ENV, HOME=str(workdir), TMPDIR=str(workdir))
        with (
            open(workdir / "stdin.txt", "rb") as fin,
            open(workdir / "stdout.txt", "wb") as fout,
            open(workdir / "stderr.txt", "wb") as ferr,
        ):
            try:
                proc = _Started(argv, cwd=workdir, env=env, stdin=fin, stdout=fout, stderr=ferr,
                                start_new_session=True, close_fds=True, pass_fds=fds)  # fmt: skip
            except OSError as e:
                raise RunnerError(f"cannot start {limits.python!r} for a code test: {e}") from e
        proc.nonce = spec["nonce"]
        if slot is not None:
            try:
                cgroup.enter(slot, proc.pid)
                os.write(go_w, b"1")
            except OSError as e:
                kill_process(proc)
                raise RunnerError(f"cannot move a test program into its cgroups {slot}: {e}") from e
        return proc
    finally:
        for fd in (go_r, go_w):
            if fd is not None:
                os.close(fd)


def _wait(
    procs: list[subprocess.Popen], wall_s: float, stop_with: subprocess.Popen | None = None
) -> list[tuple[bool, int, float]]:
    """Wait for ``procs`` at most ``wall_s`` seconds together (then kill the groups still running);
    when ``stop_with`` ends, the others are killed (an assert test's program once its judge decided).
    Returns per process (timed out, return code, CPU seconds it used). Waits on pidfds and reaps with
    ``wait4`` (no polling); without pidfds, polls."""
    timed_out = set()
    end = time.monotonic() + wall_s
    try:
        pidfds = {os.pidfd_open(p.pid): p for p in procs}
    except (AttributeError, OSError):
        pidfds = None
    if pidfds is not None:
        try:
            pending = dict(pidfds)
            while pending:
                ready = select.select(list(pending), [], [], max(0.0, end - time.monotonic()))[0]
                if not ready:
                    for fd, proc in pending.items():
                        timed_out.add(proc.pid)
                        kill_group(proc.pid)
                    break
                for fd in ready:
                    if pending.pop(fd) is stop_with:
                        for other in pending.values():
                            kill_group(other.pid)
        finally:
            for fd in pidfds:
                os.close(fd)
    else:
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out.add(proc.pid)
                kill_group(proc.pid)
    out = []
    for proc in procs:
        kill_group(proc.pid)  # descendants that outlived the program
        if proc.returncode is None:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            out.append((proc.pid in timed_out, proc.returncode, usage.ru_utime + usage.ru_stime))
        else:  # reaped by the fallback: CPU time unknown, the wall clock ruled
            out.append((proc.pid in timed_out, proc.returncode, 0.0))
    return out


def _json_value(shown: str, outcome: TestOutcome | None = None) -> Any:
    """The call's return value as the JSON value it would serialise to (tuples -> lists, keys -> strings);
    a value that is not plain data (an object, whatever its ``repr`` says) stays its ``repr`` string
    (counted as ``sandbox/non_plain_value``)."""
    try:
        value = parse_plain(shown)
    except NotPlain:
        if outcome is not None:
            outcome.sandbox["sandbox/non_plain_value"] += 1
        return shown
    try:
        return json.loads(json.dumps(value, default=repr))
    except (ValueError, TypeError, RecursionError):
        return shown


def _read_result(path: Path, nonce: str, outcome: TestOutcome | None) -> dict[str, Any] | None:
    """The harness's result; None when absent or not the harness's (counted as ``sandbox/forged_result``:
    the program wrote its own result channel)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    try:
        data = parse_plain(text) if text else None
    except NotPlain:
        data = None
    if not isinstance(data, dict) or data.get("nonce") != nonce:
        if text and outcome is not None:
            outcome.sandbox["sandbox/forged_result"] += 1
        return None
    return data


def _status(outcome: TestOutcome, name: str, error: str = "") -> None:
    outcome.status, outcome.error = name, clip(error, 1000)


def _stopped_by_a_limit(
    outcome: TestOutcome, limits: CaseLimits, timed_out: bool, returncode: int, cpu_s: float, *results: Any
) -> bool:
    """Set the status of a test the runner's limits stopped (wall clock, CPU, memory cgroup) and return
    True; raise RunnerError when a process could not be confined (``results``: the harness results)."""
    for r in results:
        if r and r.get("status") == "isolation":
            raise RunnerError(f"the isolation layer could not be applied to a test process: {r.get('error')}")
    if timed_out:
        _status(outcome, "timeout", f"wall-clock limit of {limits.wall_limit_s:g}s exceeded")
    elif returncode == -signal.SIGXCPU or cpu_s > limits.time_limit_s:
        _status(outcome, "timeout", f"CPU time limit of {limits.time_limit_s:g}s exceeded ({cpu_s:.2f}s used)")
    elif outcome.sandbox["sandbox/oom_kill"]:
        _status(outcome, "memory", f"memory limit of {limits.memory_mb} MB (+ its scratch directory) exceeded")
    else:
        return False
    return True


def _ended_early(returncode: int, stderr: str) -> str:
    """Why a program's process ended before its test finished."""
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        return f"the program was killed by {name}\n{stderr}"
    return f"the program exited (code {returncode}) before the test finished\n{stderr}"


def _classify_assert(
    outcome: TestOutcome,
    limits: CaseLimits,
    waited: list[tuple[bool, int, float]],
    result: dict[str, Any] | None,
    judged: dict[str, Any] | None,
    stderr: str,
    judge_stderr: str,
) -> None:
    """The status of an assert test from its judge's verdict and what became of the program's process."""
    (timed_out, returncode, cpu), (judge_timed_out, judge_code, _) = waited
    counts = judged.get("counts") if judged else None
    if isinstance(counts, dict):
        for key in ("non_plain_value", "early_exit"):
            outcome.sandbox[f"sandbox/{key}"] += int(counts.get(key, 0) or 0)
    if _stopped_by_a_limit(outcome, limits, timed_out or judge_timed_out, returncode, cpu, result, judged):
        return None
    if result and result.get("status") == "memory":
        return _status(outcome, "memory", f"address-space limit of {limits.memory_mb} MB exceeded")
    if judged is None:
        raise RunnerError(
            f"the judge of an assert test ended without a verdict (exit code {judge_code}): "
            f"{judge_stderr.strip()[-500:]}"
        )
    verdict = judged.get("status")
    if verdict == "ok":
        return _status(outcome, "passed")
    if verdict == "assertion":
        return _status(outcome, "wrong_answer", judged.get("error", ""))
    if verdict == "unsupported":
        raise RunnerError(f"this assert test cannot be judged outside the program's process: {judged['error']}")
    if verdict != "program_ended":
        return _status(outcome, "runtime_error", judged.get("error", ""))
    if result is not None and result.get("status") not in (None, "ok"):
        return _status(outcome, "runtime_error", result.get("error", "") or stderr)
    return _status(outcome, "runtime_error", _ended_early(returncode, stderr))


def _classify(
    outcome: TestOutcome,
    suite: TestSuite,
    index: int,
    limits: CaseLimits,
    timed_out: bool,
    returncode: int,
    result: dict[str, Any] | None,
    stdout: str,
    stderr: str,
) -> None:
    if _stopped_by_a_limit(outcome, limits, timed_out, returncode, outcome.cpu_s, result):
        return None
    if (
        outcome.output_truncated
        or (result and result.get("status") == "output_limit")
        or (returncode < 0 and -returncode == signal.SIGXFSZ)
    ):
        outcome.output_truncated = True
        return _status(outcome, "wrong_answer", f"output exceeded {limits.max_output_bytes} bytes and was cut")
    if result is None:
        if "MemoryError" in stderr:
            return _status(outcome, "memory", f"address-space limit of {limits.memory_mb} MB exceeded")
        if suite.kind == "stdio" and returncode == 0:  # exited on its own (os._exit): judge what it printed
            ok = outputs_match(stdout, suite.cases[index].expected)
            return _status(outcome, "passed" if ok else "wrong_answer")
        return _status(outcome, "runtime_error", _ended_early(returncode, stderr))
    kind = result.get("status")
    if kind == "memory":
        return _status(outcome, "memory", f"address-space limit of {limits.memory_mb} MB exceeded")
    if kind != "ok":
        return _status(outcome, "runtime_error", result.get("error", "") or stderr)
    if suite.kind == "stdio":
        ok = outputs_match(stdout, suite.cases[index].expected)
    else:
        value = _json_value(str(result.get("value", "None")), outcome)
        outcome.actual = clip(value)
        ok = call_result_matches(value, suite.cases[index].expected)
    return _status(outcome, "passed" if ok else "wrong_answer")
