"""Code: hidden ``tests``; the last fenced program of the answer runs on them (all must pass, or the pass rate
with ``reward.code_correct=pass_rate``); serve votes on the program text.

Serve's guess (documented in the API): a text without a stated domain is ``code`` when it contains a fenced code
block, or any of :data:`CODE_CUES` (case-insensitive, on word boundaries); everything else is ``math``, the
served domain marked ``guess_default``. Clients that know the domain should send it (``domain`` in
``/v1/teams``, ``metaagent.domain`` in chat requests).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from metaagent.data.tasks import Task
from metaagent.domain import Domain, Verdict, register_domain
from metaagent.execution.code import extract_program, run_code_tests
from metaagent.records import Execution
from metaagent.rewards.errors import ExecutionError, RewardError, TestsFormatError
from metaagent.rewards.provenance import answer_from_agents
from metaagent.rewards.score import RewardConfig, code_limits

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


def looks_like(text: str) -> bool:
    """A fenced code block or a :data:`CODE_CUES` phrase (module docstring)."""
    return "```" in text or _CUE_RE.search(text) is not None


def score(task: Task, execution: Execution, cfg: RewardConfig) -> Verdict:
    program = extract_program(execution.answer, languages=cfg.fence_languages) if execution.answer else None
    if program is None:
        return Verdict(0.0, {"code": {"status": "no_program"}})
    if not answer_from_agents("code", program, execution, task.question):  # the script wrote it: not run
        return Verdict(0.0, {"code": {"status": "not_from_agents"}}, ("answer_not_from_agents",))
    pass_rate = cfg.code_correct == "pass_rate"
    time_s, memory_mb = code_limits(task, cfg)
    details: dict[str, Any] = {"code_limits": {"time_limit_s": time_s, "memory_mb": memory_mb}}
    try:
        result = run_code_tests(
            program,
            task.tests,
            fn_name=task.metadata.get("fn_name"),
            time_limit_s=time_s,
            memory_mb=memory_mb,
            workers=cfg.code_workers,
            stop_on_failure=cfg.stop_on_failure and not pass_rate,
            site_packages=cfg.site_packages,
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
        row_fields=ROW_FIELDS,
        served=True,
        looks_like=looks_like,
    )
)
