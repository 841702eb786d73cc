"""Host tools a workflow script may call: run a candidate program on the public tests or on an input.

Tools execute on the HOST, never in the sandbox worker: the worker sends "call tool T with these
arguments", the host runs the function (here, programs run through :func:`metaagent.execution.code.run_code_tests`,
each in its own short-lived limited process) and answers with the result string.

The docstrings of the ``__call__`` methods are what the designer reads (``api_reference``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from metaagent.data.retrieval import CORPUS_FILE, corpus_retriever
from metaagent.data.tasks import Task
from metaagent.domain import get_domain
from metaagent.envs import make_env
from metaagent.execution.code import extract_program, run_code_tests

#: per-run limits of a program started by a tool (tools must stay fast: they run inside a rollout)
TOOL_TIME_LIMIT_S = 2.0
TOOL_MEMORY_MB = 512
MAX_RESULT_CHARS = 1500


def _program(text: str) -> str:
    """The program inside an agent reply: its last ```python block, else the text itself."""
    if not isinstance(text, str):
        raise TypeError(f"the program must be text, got {type(text).__name__}")
    return extract_program(text) or text


def _clip(text: str) -> str:
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + "\n...[cut]"


class RunTests:
    """``run_tests(program)``: the task's public tests (``task.metadata["public_tests"]``)."""

    def __init__(
        self, public_tests: Any, *, time_limit_s: float = TOOL_TIME_LIMIT_S, memory_mb: int = TOOL_MEMORY_MB
    ) -> None:
        self.public_tests = public_tests
        self.time_limit_s = time_limit_s
        self.memory_mb = memory_mb

    def __call__(self, program: str) -> str:
        """Run a Python program (or a reply holding one in a ```python block) on the task's public tests.
        Returns "PASS: ..." if all pass, "FAIL: ..." with the first failing input, expected and actual
        output, or "NO TESTS: ..." when the task has no public tests."""
        code = _program(program)
        if not self.public_tests:
            return (
                "NO TESTS: this task has no public tests; check the program by reasoning or with run_program"
            )

        result = run_code_tests(
            code, self.public_tests, time_limit_s=self.time_limit_s, memory_mb=self.memory_mb, workers=1
        )
        prefix = "PASS" if result.all_passed else "FAIL"
        return _clip(f"{prefix}: {result.summary()}")


class RunProgram:
    """``run_program(program, input="")``: run a program on a given standard input."""

    def __init__(self, *, time_limit_s: float = TOOL_TIME_LIMIT_S, memory_mb: int = TOOL_MEMORY_MB) -> None:
        self.time_limit_s = time_limit_s
        self.memory_mb = memory_mb

    def __call__(self, program: str, input: str = "") -> str:
        """Run a Python program (or a reply holding one in a ```python block) with the given standard
        input and return what it printed, or the error."""
        if not isinstance(input, str):
            raise TypeError(f"run_program's input must be text, got {type(input).__name__}")
        code = _program(program)

        result = run_code_tests(
            code,
            {"inputs": [input], "outputs": [""]},
            time_limit_s=self.time_limit_s,
            memory_mb=self.memory_mb,
            workers=1,
        )
        outcome = result.tests[0]
        if outcome.status in ("passed", "wrong_answer"):  # it ran; "expected" was a dummy
            return _clip(outcome.actual if outcome.actual.strip() else "(the program printed nothing)")
        detail = f": {outcome.error}" if outcome.error else ""
        return _clip(
            f"ERROR ({outcome.status}){detail}\nprinted before the error: {outcome.actual or '(nothing)'}"
        )


class EnvObserve:
    """``env_observe()``: the planning environment's current state (plan tasks only)."""

    def __init__(self, env) -> None:
        self.env = env  # host-side (metaagent.envs); the branching scorer reads it through this attribute

    def __call__(self) -> str:
        """Return the current state of the task's environment (a grid as text)."""
        return self.env.observe()


class EnvStep:
    """``env_step(answer)``: apply a final answer to the planning environment (plan tasks only)."""

    def __init__(self, env) -> None:
        self.env = env

    def __call__(self, answer: str) -> str:
        """Apply an answer (the text after a line starting with #####: a move list like [U, R, D] or a
        grid / list of fill steps) to the task's environment. Returns "SOLVED" or "NOT SOLVED" and the new
        state."""
        if not isinstance(answer, str):
            raise TypeError(f"env_step's answer must be text, got {type(answer).__name__}")
        return _clip(self.env.step(answer))


def plan_tools(task: Task) -> dict[str, Callable[..., str]]:
    """The environment tools of a plan task: one fresh env per execution, built from the task's seed."""
    env = make_env(task.metadata["env"])
    return {"env_observe": EnvObserve(env), "env_step": EnvStep(env)}


class Retrieve:
    """``retrieve(query)``: the top passages of the task's offline corpus (QA tasks; UnityMAS-O's retriever)."""

    def __init__(self, corpus: str | None = None, *, k: int = 2) -> None:
        self.corpus = corpus
        self.k = k

    def __call__(self, query: str) -> str:
        """Search the offline corpus for a short query and return the best passages, one per line as
        "[title] text", or "NO RESULTS" when nothing matches."""
        if not isinstance(query, str):
            raise TypeError(f"retrieve's query must be text, got {type(query).__name__}")

        hits = corpus_retriever(self.corpus or str(CORPUS_FILE)).search(query, self.k)
        if not hits:
            return "NO RESULTS"
        return _clip("\n".join(f"[{p.title}] {p.text}" for p in hits))


#: tool name -> the documented call (rendered by api_reference)
TOOL_DOCS: dict[str, Callable[..., str]] = {
    "run_tests": RunTests.__call__,
    "run_program": RunProgram.__call__,
    "env_observe": EnvObserve.__call__,
    "env_step": EnvStep.__call__,
    "retrieve": Retrieve.__call__,
}


def default_tools(task: Task | Mapping[str, Any] | str) -> dict[str, Callable[..., str]]:
    """The tools of a task: ``run_tests`` (public tests, if any) and ``run_program``, for every domain, and the
    ones its domain adds (``Domain.tools``): plan tasks ``env_observe`` and ``env_step`` on a fresh host-side
    environment, QA tasks ``retrieve`` over ``metadata["corpus"]`` (a corpus file; default the bundled corpus)."""
    public = None
    extra: dict[str, Callable[..., str]] = {}
    if not isinstance(task, str):
        task = Task.coerce(task)
        public = task.metadata.get("public_tests") if isinstance(task.metadata, Mapping) else None
        extra = get_domain(task.domain).tools(task)
    return {"run_tests": RunTests(public), "run_program": RunProgram(), **extra}
