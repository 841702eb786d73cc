"""The bundled offline task set: size, difficulty levels, splits, checked answers, passing references."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from metaagent.data import code_references, load_bundled, load_tasks
from metaagent.rewards import check_math, normalize_tests, run_code_tests

ROOT = Path(__file__).resolve().parents[2]
MATH = load_bundled(domain="math")
CODE = load_bundled(domain="code")
REFS = code_references()


def _exact(expression: str) -> Fraction:
    """Independent evaluation: Python arithmetic on Fractions (the generator uses an AST walk)."""
    allowed = set("0123456789+-*/() ")
    assert set(expression) <= allowed, expression
    tokens = expression.replace("(", " ( ").replace(")", " ) ").split()
    source = " ".join(f"Fraction({t})" if t.isdigit() else t for t in tokens)
    return eval(source, {"Fraction": Fraction, "__builtins__": {}})


def test_sizes_and_levels():
    assert len(MATH) >= 200 and len(CODE) >= 50
    assert set(Counter(t.metadata["level"] for t in MATH)) == {1, 2, 3, 4, 5}
    assert set(Counter(t.metadata["level"] for t in CODE)) == {1, 2, 3}
    kinds = Counter("fn_name" in t.metadata for t in CODE)
    assert kinds[True] >= 15 and kinds[False] >= 15  # a mix of call-based and stdin/stdout


def test_easiest_level_is_one_step_arithmetic():
    easy = [t for t in MATH if t.metadata["level"] == 1]
    assert all(t.question.startswith("What is ") and len(t.question) < 20 for t in easy)
    assert any(t.question == "What is 20 + 20?" for t in easy)


def test_splits_cover_every_level_and_ids_are_unique():
    for tasks in (MATH, CODE):
        for split in ("train", "val", "test"):
            levels = {t.metadata["level"] for t in tasks if t.split == split}
            assert levels == {t.metadata["level"] for t in tasks}, split
    ids = [t.id for t in MATH + CODE]
    assert len(ids) == len(set(ids))
    assert len(load_bundled("train")) + len(load_bundled("val")) + len(load_bundled("test")) == len(ids)
    assert {t.id for t in load_tasks("bundled:val")} == {t.id for t in MATH + CODE if t.split == "val"}


def test_every_math_answer_is_recomputed_and_accepted_by_the_checker():
    for task in MATH:
        value = _exact(task.metadata["expression"])
        assert Fraction(task.answer) == value, task.id
        assert check_math(task.answer, task.answer).status == "correct"
    assert any("/" in t.answer for t in MATH)  # some fraction answers


def test_code_tasks_have_tests_public_tests_origin_and_no_reference_in_the_question():
    assert set(REFS) == {t.id for t in CODE}
    for task in CODE:
        suite = normalize_tests(task.tests, fn_name=task.metadata.get("fn_name"))
        public = normalize_tests(task.metadata["public_tests"])
        assert len(suite) >= 3 and 1 <= len(public) < len(suite)
        assert public.cases == suite.cases[: len(public)]
        assert task.metadata["origin"] and task.source == "bundled"
        solution = REFS[task.id]
        assert solution not in task.question and solution not in str(task.metadata)
        long_lines = [line.strip() for line in solution.splitlines() if len(line.strip()) >= 25]
        assert not [line for line in long_lines if line in task.question], task.id


def test_a_few_references_pass_quickly():
    for task in [t for t in CODE if t.metadata["level"] == 1][:4]:
        assert run_code_tests(REFS[task.id], task.tests).all_passed, task.id


@pytest.mark.slow
def test_every_reference_solution_passes_and_a_wrong_one_fails():
    for task in CODE:
        result = run_code_tests(REFS[task.id], task.tests, workers=2)
        assert result.all_passed, f"{task.id}: {result.summary()}"
        wrong = (
            "print(0)\n"
            if "fn_name" not in task.metadata
            else f"def {task.metadata['fn_name']}(*a):\n    return 0\n"
        )
        assert not run_code_tests(wrong, task.tests, workers=2, stop_on_failure=True).all_passed, task.id


@pytest.mark.slow
def test_generator_reproduces_the_committed_files():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_bundled_tasks.py"), "--check"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
