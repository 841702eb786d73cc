"""Code answers: extract the program from agent text and run it against a task's tests.

Paper App. B: "The final generated program is compiled and executed against the dataset's hidden unit
tests. The reward R_correct = 1 is assigned if and only if the code successfully passes all unit tests
without exceeding the environment's execution time or memory constraints."

* :func:`extract_program`: the last fenced code block in an accepted language (default python / py /
  python3 / an unlabelled fence).
* :func:`run_code_tests`: every test in its own limited process (see :mod:`.code_runner`), up to
  ``workers`` at a time, returning a :class:`CodeResult`. Test formats are described in
  :mod:`.code_tests`. The workflow tools (``run_tests``, ``run_program``) call this on the host, inside
  :func:`deadline` (the execution's time budget: no test runs past it).

Every program runs under the isolation layer of :mod:`.isolation` (Landlock or namespaces where the kernel
offers them: no writes outside its temporary directory, no reads outside the standard library and system
libraries, no network, no shared memory, no new processes), plus resource limits, a memory cgroup where
one can be made and a process-group kill; its verdict is decided outside its process (:mod:`.code_runner`).
The README's "Sandbox: what is covered" lists what that does and does not stop.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .code_runner import SANDBOX_COUNTERS, TEST_STATUSES, CaseLimits, TestOutcome, run_test_case
from .code_tests import TestSuite, normalize_tests

DEFAULT_FENCE_LANGUAGES: tuple[str, ...] = ("python", "py", "python3", "")
DEFAULT_WORKERS = max(1, min(4, os.cpu_count() or 1))

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("metaagent_code_deadline", default=None)


@contextlib.contextmanager
def deadline(at: float | None) -> Iterator[None]:
    """Within this block no test of :func:`run_code_tests` runs past ``at`` (a ``time.monotonic()`` time;
    None: no deadline; nested blocks keep the earlier one): a test still running then, or not started,
    is a ``timeout``. The workflow session runs every tool call in one."""
    outer = _DEADLINE.get()
    token = _DEADLINE.set(at if outer is None else (outer if at is None else min(outer, at)))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


_FENCE_RE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)


def extract_program(text: str | None, *, languages: tuple[str, ...] = DEFAULT_FENCE_LANGUAGES) -> str | None:
    """The content of the last complete fenced block whose language tag is in ``languages`` (lower-case;
    ``""`` accepts an unlabelled fence). None when there is none (an unclosed fence does not count)."""
    if not text:
        return None
    wanted = {lang.lower() for lang in languages}
    blocks = [m.group(2) for m in _FENCE_RE.finditer(text) if m.group(1).lower() in wanted]
    for block in reversed(blocks):
        if block.strip():
            return block.rstrip() + "\n"
    return None


@dataclass
class CodeResult:
    """Outcome of running one program on a test suite.

    ``status`` is ``passed`` when every test passed, else the status of the first failing test (in test
    order). ``skipped`` tests were not run because an earlier one failed and ``stop_on_failure`` was set.
    """

    passed: int
    total: int
    status: str
    tests: list[TestOutcome] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def first_failure(self) -> TestOutcome | None:
        return next((t for t in self.tests if t.status not in ("passed", "skipped")), None)

    def status_counts(self) -> dict[str, int]:
        counts = {s: 0 for s in TEST_STATUSES}
        for t in self.tests:
            counts[t.status] += 1
        return {s: n for s, n in counts.items() if n}

    def summary(self) -> str:
        """A few lines for an agent or a log: pass count and the first failure with input/expected/actual."""
        head = f"{self.passed}/{self.total} tests passed ({self.status})"
        fail = self.first_failure
        if fail is None:
            return head
        lines = [
            head,
            f"first failure: test {fail.index}: {fail.status}",
            f"input: {fail.input}",
            f"expected: {fail.expected}",
            f"got: {fail.actual}",
        ]
        if fail.error:
            lines.append(f"error: {fail.error}")
        return "\n".join(lines)

    def sandbox_counts(self) -> dict[str, int]:
        """What the program tried against its sandbox, summed over tests (:data:`SANDBOX_COUNTERS`)."""
        return {key: sum(t.sandbox.get(key, 0) for t in self.tests) for key in SANDBOX_COUNTERS}

    def to_dict(self) -> dict[str, Any]:
        first = self.first_failure
        return {
            "passed": self.passed,
            "total": self.total,
            "status": self.status,
            "elapsed_s": self.elapsed_s,
            "counts": self.status_counts(),
            "first_failure": first.to_dict() if first else None,
            "sandbox": self.sandbox_counts(),
        }


def run_code_tests(
    program: str,
    tests: Any,
    *,
    time_limit_s: float = 4.0,
    memory_mb: int = 1024,
    workers: int = DEFAULT_WORKERS,
    fn_name: str | None = None,
    stop_on_failure: bool = False,
    max_output_bytes: int = 16 << 20,
    site_packages: bool = False,
) -> CodeResult:
    """Run ``program`` on every test of ``tests`` (any form accepted by :func:`normalize_tests`).

    Each test runs in its own process with ``time_limit_s`` CPU seconds (the wall clock allows 3x as much)
    and ``memory_mb`` of
    address space; up to ``workers`` tests run at once. ``stop_on_failure`` skips tests not yet started
    once one fails (faster when only "all passed" matters). ``site_packages=False`` runs ``python -S``:
    standard library only, faster start.

    Raises :class:`~metaagent.rewards.errors.TestsFormatError` for malformed tests and
    :class:`~metaagent.rewards.errors.RunnerError` when the runner itself fails; everything the program
    does (wrong output, crash, timeout, memory) is a status in the result.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    suite: TestSuite = normalize_tests(tests, fn_name=fn_name)
    limits = CaseLimits(time_limit_s, memory_mb, max_output_bytes, site_packages=site_packages)
    start = time.monotonic()
    failed = threading.Event()
    until = _DEADLINE.get()  # read here: the pool's threads do not see this context

    def run(index: int) -> TestOutcome:
        if stop_on_failure and failed.is_set():
            return TestOutcome(index, "skipped")
        outcome = run_test_case(program, suite, index, limits, deadline=until)
        if not outcome.passed:
            failed.set()
        return outcome

    indices = range(len(suite))
    if workers == 1 or len(suite) == 1:
        outcomes = [run(i) for i in indices]
    else:
        with ThreadPoolExecutor(max_workers=min(workers, len(suite)), thread_name_prefix="code-test") as pool:
            outcomes = list(pool.map(run, indices))
    passed = sum(o.passed for o in outcomes)
    first = next((o for o in outcomes if o.status not in ("passed", "skipped")), None)
    return CodeResult(
        passed=passed,
        total=len(outcomes),
        status="passed"
        if first is None and passed == len(outcomes)
        else (first.status if first else "skipped"),
        tests=outcomes,
        elapsed_s=time.monotonic() - start,
    )
