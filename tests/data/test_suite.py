"""The structure-sensitive task suite: families, splits, exact answers, no copyable expression, references."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from metaagent.data import DataError, DatasetSpec, load_tasks
from metaagent.data.suite import FAMILIES, suite_references, suite_rows
from metaagent.rewards import check_math, run_code_tests

ROOT = Path(__file__).resolve().parents[2]
TASKS = load_tasks(DatasetSpec("suite", split="all"))
REFS = suite_references()


def _printed(program: str) -> str:
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


def test_families_splits_and_sources():
    assert {"arith", "strings", "code", "lookup", "start"} <= set(FAMILIES)
    for family in FAMILIES:
        tasks = load_tasks(f"suite_{family}:test")
        assert len(tasks) >= 30 and {t.metadata["family"] for t in tasks} == {family}
        kinds = {t.metadata["kind"] for t in TASKS if t.metadata["family"] == family}
        for split in ("train", "val", "test"):  # every generator kind in every split
            assert {t.metadata["kind"] for t in TASKS if t.metadata["family"] == family and t.split == split} == kinds
    ids = [t.id for t in TASKS]
    assert len(ids) == len(set(ids)) and set(REFS) == set(ids)
    questions = [t.question for t in TASKS]
    assert len(questions) == len(set(questions))  # no task twice, so no test task is a train task
    with pytest.raises(DataError, match="unknown suite family 'nope'"):
        list(suite_rows("test", "nope"))


def test_math_answers_are_plain_integers_that_the_reference_program_prints():
    math = [t for t in TASKS if t.domain == "math"]
    assert all(re.fullmatch(r"-?\d+", t.answer) for t in math)
    sample = math[::25]  # one process per program: a sample here, every one in the generator's --check
    printed = _printed("".join(f"exec({REFS[t.id]!r})\n" for t in sample)).split("\n")
    assert printed == [t.answer for t in sample]
    assert all(check_math(f"\\boxed{{{t.answer}}}", t.answer).status == "correct" for t in sample)


def test_no_math_question_holds_an_expression_to_copy():
    """Operator symbols or words would let a model box the question's own expression (issue #38)."""
    for task in (t for t in TASKS if t.domain == "math"):
        text = re.sub(r'"[^"]*"', "", task.question)  # quoted words of the string questions hold no arithmetic
        words = r"(plus|minus|times|divided by|multiplied by|less than|more than)"
        assert not re.search(rf"\d\s*([-+*/x×^]|{words})\s*\d", text), task.question


def test_code_tasks_have_public_tests_a_passing_reference_and_a_failing_wrong_one():
    code = [t for t in TASKS if t.domain == "code"]
    assert code
    for task in code[::40]:
        public = task.metadata["public_tests"]
        assert public["inputs"] == task.tests["inputs"][: len(public["inputs"])] and len(task.tests["inputs"]) >= 5
        assert REFS[task.id] not in task.question
        assert run_code_tests(REFS[task.id], task.tests).all_passed, task.id
        assert not run_code_tests("print(0)\n", task.tests, stop_on_failure=True).all_passed, task.id


@pytest.mark.slow
def test_generator_reproduces_the_committed_files():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_suite_tasks.py"), "--check"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert Counter(t.split for t in TASKS)["test"] == 40 * len(FAMILIES)
