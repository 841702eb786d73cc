"""Rewards (paper App. B): math verification, code execution, format reward and their sum (Eq. 10), the
shortcut rules and answer provenance, turn rewards and their allocators, and a domain's registered reward
function run under a deadline (:mod:`.task_reward`).

Entry points: :func:`score_execution` / :func:`score_executions` / :func:`score_tree` with a
:class:`RewardConfig`; the building blocks :func:`check_math`, :func:`run_code_tests`,
:func:`extract_answer`, :func:`extract_program` are public for tools and evaluation.
"""

from metaagent.execution.code import CodeResult, extract_program, run_code_tests
from metaagent.execution.code_runner import TestOutcome
from metaagent.execution.code_tests import TestSuite, normalize_tests

from .errors import CheckTimeout, RewardError, RunnerError, TestsFormatError
from .format import delivery_format, format_components, solution_format
from .math import DEFAULT_FALLBACKS, MathCheck, check_math, extract_answer, math_equal
from . import at_code as _at_code  # noqa: F401  (registers the AT-GRPO coder-tester turn-reward preset)
from . import at_math as _at_math  # noqa: F401  (registers the AT-GRPO math turn-reward presets)
from . import plan as _plan  # noqa: F401  (registers the planning turn-reward presets)
from .score import RewardConfig, reward_metrics, score_execution, score_executions, score_tree
from . import allocators  # noqa: E402,F401  (registers the built-in turn-reward allocators)

__all__ = [
    "DEFAULT_FALLBACKS",
    "CheckTimeout",
    "CodeResult",
    "MathCheck",
    "RewardConfig",
    "RewardError",
    "RunnerError",
    "TestOutcome",
    "TestSuite",
    "TestsFormatError",
    "check_math",
    "delivery_format",
    "extract_answer",
    "extract_program",
    "format_components",
    "math_equal",
    "normalize_tests",
    "reward_metrics",
    "run_code_tests",
    "score_execution",
    "score_executions",
    "score_tree",
    "solution_format",
]
