"""benchmarks/eval_aligned_cost.py runs on its own (its team, tasks and warm start come from the package) and
prints its table: one step of the rule prefix judge on a barely warmed tiny model."""

from __future__ import annotations

import pytest
from builders import benchmark_script, run_benchmark

pytestmark = pytest.mark.slow


def test_the_warm_start_data_covers_both_agents_of_the_team():
    bench = benchmark_script("eval_aligned_cost")
    prompts = bench.team_prompts()
    assert len(prompts) == 8  # 2 tasks x 2 executions x (Solver, Checker)
    systems = {p[0]["content"] for p in prompts if p[0]["role"] == "system"}
    assert any("Solve it." in s for s in systems) and any("Check the answer" in s for s in systems)


def test_one_step_prints_its_table():
    out = run_benchmark("eval_aligned_cost", "--steps", "1", "--variants", "rule:gold", "--warm-steps", "2",
                        timeout_s=600)  # fmt: skip
    header = next(line for line in out.splitlines() if line.startswith("variant    step"))
    assert "coalition_runs" in header and "judge_calls" in header
    row = next(line for line in out.splitlines() if line.startswith("rule:gold  "))
    assert len(row.split()) == len(header.split())
    assert "rule:gold: per step" in out
