"""Code: hidden ``tests``; the last fenced program of the answer runs on them (all must pass, or the pass rate
with ``reward.domains.code.correct=pass_rate``) under the domain's settings (``reward.domains.code``:
:class:`CodeSettings`, the test limits included); serve votes on the program text.

Serve's guess (documented in the API): a text without a stated domain is ``code`` when it contains a fenced code
block, or any of :data:`CODE_CUES` (case-insensitive, on word boundaries); everything else is ``math``, the
served domain marked ``guess_default``. Clients that know the domain should send it (``domain`` in
``/v1/teams``, ``metaagent.domain`` in chat requests).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt

from metaagent.config import Checked
from metaagent.data.tasks import Task
from metaagent.domain import Domain, Verdict, register_domain
from metaagent.execution.code import DEFAULT_WORKERS, extract_program, run_code_tests
from metaagent.records import Execution
from metaagent.rewards.errors import ExecutionError, RewardError, TestsFormatError
from metaagent.rewards.provenance import answer_from_agents
from metaagent.rewards.score import RewardConfig

CODE_CORRECTNESS = ("all_pass", "pass_rate")

#: sandbox counters of a tested program that mean it tried to decide its own verdict (shortcut forged_verdict)
FORGERY_COUNTERS = ("sandbox/forged_result", "sandbox/non_plain_value")
#: phrases that make serve take a text without a stated domain for a code task (module docstring)
CODE_CUES = (
    "write a function",
    "write a program",
    "write code",
    "implement",
    "python",
    "program that",
    "function that",
    "def ",
    "stdin",
    "standard input",
    "input format",
    "output format",
    "class solution",
)
_CUE_RE = re.compile("|".join(rf"\b{re.escape(c.strip())}\b" for c in CODE_CUES), re.IGNORECASE)
#: (math template, its code version): eval's fixed:<template> runs the code version on code tasks
TEMPLATE_TWINS = (
    ("single_math", "single_code"),
    ("reflection", "reflection_code"),
    ("ensemble_judge", "ensemble_code"),
)


@dataclass(frozen=True)
class CodeSettings(Checked):
    """The code domain's settings, ``reward.domains.code`` (e.g. ``reward.domains.code.correct=pass_rate``)."""

    correct: Literal[CODE_CORRECTNESS] = "all_pass"  # "all_pass" (paper App. B) or "pass_rate"
    time_limit_s: PositiveFloat = 4.0  # per code test, CPU seconds, for tasks that carry no limit of their own
    # per code test, address space, for tasks that carry no limit of their own (Python needs ~30 MB)
    memory_mb: Annotated[int, Field(ge=64)] = 1024
    # tasks with their own limits (CodeContests: metadata time_limit_s / memory_limit_bytes): the test gets
    # max(time_limit_floor_s, limit x time_limit_multiplier) CPU seconds and max(memory_floor_mb, limit) MB
    time_limit_multiplier: PositiveFloat = 1.0
    time_limit_floor_s: PositiveFloat = 1.0  # least CPU seconds per test of a task with its own time limit
    memory_floor_mb: Annotated[int, Field(ge=64)] = 256  # least MB per test of a task with its own memory limit
    # the most a task's own limits may grant (None: no cap, the task data is trusted, e.g. CodeContests in
    # training); metaagent-serve sets both to time_limit_s / memory_mb: a client cannot raise its limits
    max_time_limit_s: PositiveFloat | None = None  # most CPU s a task's own time limit may grant (None: no cap)
    max_memory_mb: Annotated[int, Field(ge=64)] | None = None  # most MB a task's own memory limit may grant
    workers: PositiveInt = DEFAULT_WORKERS  # code tests of one program run in parallel
    stop_on_failure: bool = True  # all_pass only: skip remaining tests after the first failure
    site_packages: bool = False  # let tested programs import installed packages (slower start)


def code_limits(task: Task, settings: CodeSettings) -> tuple[float, int]:
    """(CPU seconds, memory MB) of each code test of ``task``: the task's own limits (CodeContests'
    ``time_limit_s`` / ``memory_limit_bytes`` metadata) scaled by the settings' multiplier and raised to their
    floors, else the flat ``time_limit_s`` / ``memory_mb``; then capped at ``max_time_limit_s`` /
    ``max_memory_mb`` where set:

        time_s    = min(max_time_limit_s, max(time_limit_floor_s, own_time_s * time_limit_multiplier))
        memory_mb = min(max_memory_mb, max(memory_floor_mb, own_memory_bytes >> 20))
    """
    meta = task.metadata if isinstance(task.metadata, Mapping) else {}
    time_s, memory_mb = settings.time_limit_s, settings.memory_mb
    own_time = meta.get("time_limit_s")
    if isinstance(own_time, (int, float)) and own_time > 0:
        time_s = max(settings.time_limit_floor_s, float(own_time) * settings.time_limit_multiplier)
    own_memory = meta.get("memory_limit_bytes")
    if isinstance(own_memory, int) and own_memory > 0:
        memory_mb = max(settings.memory_floor_mb, own_memory >> 20)
    if settings.max_time_limit_s is not None:
        time_s = min(time_s, settings.max_time_limit_s)
    if settings.max_memory_mb is not None:
        memory_mb = min(memory_mb, settings.max_memory_mb)
    return time_s, memory_mb


def looks_like(text: str) -> bool:
    """A fenced code block or a :data:`CODE_CUES` phrase (module docstring)."""
    return "```" in text or _CUE_RE.search(text) is not None


def score(task: Task, execution: Execution, cfg: RewardConfig) -> Verdict:
    program = extract_program(execution.answer, languages=cfg.fence_languages) if execution.answer else None
    if program is None:
        return Verdict(0.0, {"code": {"status": "no_program"}})
    if not answer_from_agents("code", program, execution, task.question):  # the script wrote it: not run
        return Verdict(0.0, {"code": {"status": "not_from_agents"}}, ("answer_not_from_agents",))
    settings: CodeSettings = cfg.domain_settings("code")
    pass_rate = settings.correct == "pass_rate"
    time_s, memory_mb = code_limits(task, settings)
    details: dict[str, Any] = {"code_limits": {"time_limit_s": time_s, "memory_mb": memory_mb}}
    try:
        result = run_code_tests(
            program,
            task.tests,
            fn_name=task.metadata.get("fn_name"),
            time_limit_s=time_s,
            memory_mb=memory_mb,
            workers=settings.workers,
            stop_on_failure=settings.stop_on_failure and not pass_rate,
            site_packages=settings.site_packages,
        )
    except TestsFormatError as e:
        return Verdict(None, details, (), "tests_format", f"task {task.id!r} has malformed tests: {e}")
    except (RewardError, ExecutionError) as e:
        return Verdict(None, details, (), "code_runner", f"code runner failed: {e}")
    details["code"] = result.to_dict()
    forged = any(result.sandbox_counts().get(key, 0) for key in FORGERY_COUNTERS)
    correct = 1.0 if result.all_passed else (result.pass_rate if pass_rate else 0.0)
    return Verdict(correct, details, ("forged_verdict",) if forged else ())


def answer_key(answer: str) -> str:
    """The extracted program with blank lines and trailing spaces removed, as ``sha1:<8 hex>``."""
    program = extract_program(answer) or answer
    lines = [line.rstrip() for line in program.strip().splitlines() if line.strip()]
    return "sha1:" + hashlib.sha1("\n".join(lines).encode()).hexdigest()[:8]


#: a task file row's fields (metaagent.data.files): the tests, then what the workflow tools and limits read
ROW_FIELDS = (
    ("tests", "tests"),
    ("public_tests", "metadata.public_tests"),
    ("fn_name", "metadata.fn_name"),
    ("starter_code", "metadata.starter_code"),
    ("time_limit_s", "metadata.time_limit_s"),
    ("memory_limit_bytes", "metadata.memory_limit_bytes"),
)

CODE = register_domain(
    Domain(
        name="code",
        reference="tests",
        needs="'tests' (or split='adhoc' for none)",
        has_reference=lambda task: bool(task.tests),
        score=score,
        solution_format=lambda answer, fences: float(extract_program(answer, languages=fences) is not None),
        answer_key=answer_key,
        answer_hint="The final answer must be a complete Python program in a ```python block.",
        solo_script='solver = Agent("Assistant", "Answer with a complete Python program in one ```python block.")\n'
        "submit(solver(task))\n",
        template_twins=TEMPLATE_TWINS,
        runs_code=True,
        settings=CodeSettings,
        row_fields=ROW_FIELDS,
        served=True,
        looks_like=looks_like,
    )
)
