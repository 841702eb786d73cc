"""AT-GRPO's coder + tester template under tree sampling with the ``at_code`` turn reward, on the records:
every call of both roles is a K-candidate group, the executed candidate is the best one, and the episode
stops at the first turn whose program passes the tester's (reference-checked) test."""

from __future__ import annotations

import pytest

from metaagent.credit import assign_credit
from metaagent.data import DatasetSpec, load_tasks
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.rollout.branching import BranchingConfig
from metaagent.rollout.config import RolloutConfig, SamplingConfig
from metaagent.rollout.engine import RolloutEngine
from metaagent.workflow import SandboxPool

(TASK,) = [t for t in load_tasks(DatasetSpec(source="bundled", split="train")) if t.id == "bundled-code-absolute_difference"]
RIGHT = "```python\na, b = map(int, input().split())\nprint(abs(a - b))\n```"
WRONG = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"  # golden pass rate 0.5


def team(request: ChatRequest) -> str:
    odd = request.sampling.seed % 2 == 1
    if request.agent == "Coder":
        return WRONG if odd else RIGHT
    return "Test Input:\n3 10\nTest Output:\n-7" if odd else "Test Input:\n3 10\nTest Output:\n7"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


def test_coder_tester_groups_select_the_passing_program(pool):
    cfg = RolloutConfig(
        m_designs=1, n_executions=2, frozen_designer="at_code_tester", executor=SamplingConfig(max_tokens=256),
        branching=BranchingConfig(k=4, turn_reward="at_code"),
    )  # fmt: skip
    engine = RolloutEngine(None, ScriptedPolicy(team), cfg, pool=pool)
    (tree,) = engine.rollout([TASK], step=0, seed=5)
    for _, e in tree.executions():
        assert e.status == "ok", e.error
        assert [t.role for t in e.turns] == ["Coder", "Tester"]  # right program + right test: stop after turn 1
        assert [g.role for g in e.groups] == ["Coder", "Tester"]
        coder, tester = e.groups
        assert set(coder.rewards) <= {1.0, 2.0} and coder.rewards[coder.selected] == 2.0  # 2 x golden pass rate
        # team 1 (the selected program passes every golden test), local 1 / 0: the reference passes / fails its test
        assert set(tester.rewards) <= {1.0, 2.0} and tester.rewards[tester.selected] == 2.0
        assert e.reward.correct == 1.0
    assert any(len(set(g.rewards)) == 2 for _, e in tree.executions() for g in e.groups)
    credit = assign_credit([tree], "at_grpo")
    assert credit.metrics["credit/at_grpo/selected_is_best"] == credit.metrics["credit/at_grpo/groups"] == 4
