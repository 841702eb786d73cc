"""Builders of rollout trees from reward matrices, for credit tests."""

from __future__ import annotations

import pytest

from metaagent.records import (
    AgentTurn,
    CheckReport,
    Design,
    DesignerSample,
    Execution,
    RewardRecord,
    RolloutTree,
)

ERR = "ERR"  # marks an execution whose reward could not be computed
MISSING = "MISSING"  # marks an execution without a reward record


def _turn(k: int) -> AgentTurn:
    return AgentTurn(
        k,
        "Solver",
        "sys",
        [{"role": "user", "content": "q"}],
        "r",
        "r",
        [1, 2],
        [3, 4],
        [-0.5, -0.5],
        "stop",
        "m",
    )


def _execution(j: int, r) -> Execution:
    if r == MISSING:
        reward = None
    elif r == ERR:
        reward = RewardRecord(None, None, None, error="test runner crashed")
    else:
        reward = RewardRecord(float(r), float(r), 0.0)
    return Execution(j, "ok", turns=[_turn(0), _turn(1)], reward=reward)


def tree_from_matrix(rows, task_id: str = "t") -> RolloutTree:
    """rows[i] = list of rewards (ERR / MISSING allowed), [] = invalid design, None = valid but never run."""
    designs = []
    for i, row in enumerate(rows):
        sample = DesignerSample(
            [{"role": "user", "content": "design"}], "script", [5, 6], [7, 8, 9], [-1.0] * 3, "stop", "m"
        )
        if row == []:
            designs.append(Design(i, "designer", sample, None, CheckReport(False)))
        else:
            execs = [_execution(j, r) for j, r in enumerate(row or [])]
            designs.append(Design(i, "designer", sample, "print(1)", CheckReport(True), executions=execs))
    return RolloutTree("run", {"id": task_id, "domain": "math"}, 0, {}, {"designer": "m"}, designs=designs)


@pytest.fixture
def make_tree():
    return tree_from_matrix
