"""The unity_code config end to end on the tiny model: allocator before credit, per-role turn rewards and
rounds used in the metrics, turn rewards, advantages and the workflow graph in the step's records."""

from __future__ import annotations

import pytest
import torch

from metaagent.records import read_trees
from metaagent.train.config import TrainConfig
from metaagent.train.loop import TrainLoop


@pytest.fixture
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def test_unity_code_config_one_step_on_tiny(tmp_path, one_thread):
    cfg = TrainConfig.load("unity_code", [
        "policy.model=tiny", "trainer.steps=1", f"trainer.out={tmp_path}", "rollout.executor.max_tokens=12",
        "rollout.n_executions=2", "data.batch_size=1",
    ])  # fmt: skip
    with TrainLoop(cfg) as trainer:
        metrics = trainer.train()[0].metrics
    # the random tiny model never writes a <delivery> block or a program: every node -1, three full rounds
    assert metrics["reward/turn/Coder"] == metrics["reward/turn/Planner"] == -1.0
    assert metrics["rollout/rounds_used"] == 3.0 and metrics["reward/turn_rewards"] == 16
    assert metrics["credit/turn_advantages"] == 16 and metrics["credit/unity_models"] == 1
    trees, bad = read_trees(tmp_path / "rollouts" / "step_000000.jsonl")
    e = trees[0].designs[0].executions[0]
    assert not bad and e.graph["nodes"][0] == {"id": "t0", "kind": "agent", "role": "Planner", "role_turn": 0, "batch": 0}
    assert all(t.reward.source == "allocator" and t.advantage == 0.0 for t in e.turns)  # equal rewards whiten to 0
    assert e.advantage is None  # per-turn credit only
