"""Choosing one answer among k samples of one agent: the selection rules of the equal-compute single-agent
baseline (eval's ``sa@k``; the budget-matched control of issue 62 builds on the same functions).

- answer domains: the majority vote on the domain's voting key (``Domain.answer_key``, serve's vote):
  :func:`majority_index` (maj@k's choice: the most frequent answer, ties to the answer seen first);
- code tasks (``Domain.runs_code``) with public tests: the first program that passes them
  (:func:`public_tests_pass`, the scripts' own ``run_tests`` tool with its limits; the hidden tests are never
  run), or the first program when none passes.

Every function is pure except :func:`public_tests_pass`, which runs the program.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metaagent.domain import get_domain
from metaagent.workflow.tools import RunTests

from .errors import ExecutionError, RewardError, TestsFormatError

#: the selection rules (recorded by eval in ``tree.config["eval"]["select"]``)
SELECT_PUBLIC_TESTS, SELECT_MAJORITY = "public_tests", "majority"
SELECTION_RULES = (SELECT_MAJORITY, SELECT_PUBLIC_TESTS)


def majority_index(answers: Sequence[str | None]) -> int | None:
    """The position of the majority vote among ``answers`` (shape (k,)): the first sample whose answer is the
    most frequent non-None one (ties: the answer seen first); None when no sample has an answer."""
    votes: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, a in enumerate(answers):
        if a is None:
            continue
        votes[a] = votes.get(a, 0) + 1
        first.setdefault(a, i)
    if not votes:
        return None
    best = max(votes, key=lambda a: (votes[a], -first[a]))
    return first[best]


def selection_rule(task: Any) -> str:
    """How one of k samples of ``task`` is chosen: a code task (``Domain.runs_code``) with public tests keeps the
    first program that passes them; every other task votes on ``Domain.answer_key``."""
    metadata = task.metadata if isinstance(task.metadata, dict) else {}
    return (
        SELECT_PUBLIC_TESTS
        if get_domain(task.domain).runs_code and metadata.get("public_tests")
        else SELECT_MAJORITY
    )


def vote_key(task: Any, answer: str | None) -> str | None:
    """The voting key of an answer (``Domain.answer_key``); None for no answer (never a vote)."""
    return get_domain(task.domain).answer_key(answer) if answer and answer.strip() else None


def public_tests_pass(task: Any, answer: str | None) -> bool | None:
    """Whether the program in ``answer`` passes ``task``'s public tests (``run_tests``: same limits as the scripts'
    tool); False for no answer, None when the test runner itself failed (an error, never a fail)."""
    if not answer or not answer.strip():
        return False

    try:
        return RunTests(task.metadata["public_tests"])(answer).startswith("PASS")
    except (RewardError, ExecutionError, TestsFormatError):
        return None


def selection_marks(task: Any, answers: Sequence[str | None]) -> tuple[str, list[Any]]:
    """The selection rule of ``task`` (:func:`selection_rule`) and every sample's mark for :func:`choose`: its
    vote key (``majority``, :func:`vote_key`) or its public-test verdict (``public_tests``,
    :func:`public_tests_pass`, which runs each program). Shape: ``answers`` (k,) -> marks (k,)."""
    rule = selection_rule(task)
    if rule == SELECT_MAJORITY:
        return rule, [vote_key(task, a) for a in answers]
    return rule, [public_tests_pass(task, a) for a in answers]


def choose(rule: str, marks: Sequence[Any]) -> tuple[int, str | None]:
    """The sample kept among k (``marks``: their vote keys for ``majority``, their public-test verdicts for
    ``public_tests``) and an error when the choice cannot be made (a public-test run failed before the first
    passing program). No vote at all, or no passing program: the first sample."""
    if rule == SELECT_MAJORITY:
        best = majority_index(marks)
        return (0 if best is None else best), None
    if rule == SELECT_PUBLIC_TESTS:
        for i, passed in enumerate(marks):
            if passed is None:
                return i, "the public tests of a program could not be run"
            if passed:
                return i, None
        return 0, None
    raise ValueError(f"unknown selection rule {rule!r}; rules: {', '.join(SELECTION_RULES)}")
