"""``train-metaagent`` with ``rollout.adaptive_budget`` on: the step runs, logs ``rollout/adaptive/*`` and trains
on trees with unequal executions per design (the tiny model, a frozen single-agent design)."""

from __future__ import annotations

from pathlib import Path

import pytest

from metaagent.train.config import TrainConfig


@pytest.mark.slow
def test_a_training_step_with_the_adaptive_budget(tmp_path):
    from metaagent.learn.metrics import read_metrics
    from metaagent.records import read_trees
    from metaagent.train.loop import TrainLoop

    tiny = Path(__file__).parents[2] / "configs" / "tiny.yaml"
    cfg = TrainConfig.load(
        str(tiny),
        [f"trainer.out={tmp_path / 'run'}", "trainer.steps=1", "trainer.save_every=0", "schedule.mode=executor_only",
         "rollout.frozen_designer=single_math", "rollout.n_executions=3", "rollout.executor.max_tokens=8",
         "rollout.adaptive_budget.enabled=true", "rollout.adaptive_budget.first_n=2"],
    )  # fmt: skip
    with TrainLoop(cfg) as trainer:
        trainer.train()
    (row,) = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    trees, bad = read_trees(tmp_path / "run" / "rollouts" / "step_000000.jsonl")
    assert not bad and len(trees) == 2
    counts = [len(d.executions) for t in trees for d in t.designs]
    assert row["rollout/adaptive/budget"] == 6  # 2 tasks x 1 valid design x N = 3
    assert row["rollout/adaptive/executions"] == sum(counts) == row["rollout/executions"] <= 6
    assert all(2 <= c <= 6 for c in counts)
    assert row["rollout/adaptive/designs_stopped"] == sum(c < 3 for c in counts)
    assert row["credit/executions"] == sum(counts)
