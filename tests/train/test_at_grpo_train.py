"""``train-metaagent`` with the AT-GRPO CPU config's shape, one step on the tiny model: tree sampling on a plan
task, call-time turn rewards on the live environment, the at_grpo estimator and one sample per candidate."""

from __future__ import annotations

import json

import pytest

from metaagent.learn.metrics import read_metrics
from metaagent.records import read_trees
from metaagent.train.config import TrainConfig
from metaagent.train.loop import TrainLoop

pytestmark = pytest.mark.slow


def test_one_at_grpo_step_on_planpath(tmp_path):
    out = tmp_path / "run"
    cfg = TrainConfig.load(
        "configs/at_grpo_planpath_cpu.yaml",
        [
            "policy.model=tiny",
            f"data.train=[{json.dumps({'source': 'planpath', 'split': 'train', 'limit': 2, 'env': {'size': 5}})}]",
            "data.val=[]",
            "data.batch_size=1",
            "rollout.executor.max_tokens=8",
            "rollout.branching.k=3",
            "trainer.steps=1",
            f"trainer.out={out}",
        ],
    )
    with TrainLoop(cfg) as trainer:
        trainer.train()
    rows, _ = read_metrics(out / "metrics.jsonl")
    (metrics,) = rows
    trees, bad = read_trees(next((out / "rollouts").glob("step_*.jsonl")))
    assert not bad and len(trees) == 1
    (e,) = [e for _, e in trees[0].executions()]
    assert [t.role for t in e.turns] == ["ToolAgent", "PlanAgent", "ToolAgent", "PlanAgent"]  # T = 2, unsolved
    assert [g.role for g in e.groups] == ["PlanAgent", "PlanAgent"] and all(len(g.candidates) == 3 for g in e.groups)
    assert all(r is not None for g in e.groups for r in g.rewards)  # every random reply still gets a computed reward
    assert metrics["credit/at_grpo/groups"] == 2 and metrics["credit/at_grpo/candidates"] == 6
    assert metrics["credit/at_grpo/selected_is_best"] == 2
    # branched PlanAgent calls train through their candidates; unbranched ToolAgent turns get no advantage
    assert metrics["samples/candidates"] == 6
    assert metrics["credit/at_grpo/ungrouped_turns"] == 2
