"""Every AT-GRPO config loads, names a registered turn reward and a template of the bank, and keeps the
paper's settings (§5.1: K = 4 for every agent, lr 1e-6, greedy validation) unless it is the CPU toy."""

from __future__ import annotations

from pathlib import Path

import pytest

from metaagent.rewards.turn import get_turn_reward
from metaagent.train.config import TrainConfig
from metaagent.workflow import load_templates

CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("at_grpo_*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_at_grpo_config(path):
    cfg = TrainConfig.load(str(path), [])
    assert cfg.algo.estimator == "at_grpo" and cfg.schedule.mode == "executor_only"
    get_turn_reward(cfg.rollout.branching.turn_reward)  # registered
    assert cfg.rollout.frozen_designer in {t.name for t in load_templates()}
    if not path.stem.endswith("_cpu"):
        assert (cfg.rollout.branching.k, cfg.rollout.branching.roles, cfg.optim.lr) == (4, ["*"], 1e-6)
        assert cfg.trainer.val_greedy and cfg.rollout.executor.temperature == 1.0


def test_the_code_config_is_present():
    assert "at_grpo_code" in {p.stem for p in CONFIGS}
