"""``algo.designer_baseline: control`` and ``rollout.budget`` in training: the config's checks, the options the
loop passes to the estimator, and ``train-metaagent --model tiny --steps 1`` end to end with both on (scripted
reply texts, tests/builders.py::forced_generate: the records hold the controls, the metrics exist)."""

from __future__ import annotations

import json

import pytest
from builders import forced_generate, seed_of
from warm_tiny import SCRIPT, TAGGED, UNTAGGED

from metaagent.config import ConfigError
from metaagent.credit import control_baselines
from metaagent.data import Task
from metaagent.learn.metrics import read_metrics
from metaagent.policy.hf import HFPolicy
from metaagent.records import read_trees
from metaagent.rewards.selection import selection_rule
from metaagent.rollout.budget import BUDGET_LINES
from metaagent.train.config import TrainConfig
from metaagent.train.loop import credit_options

PAIR = 'a = Agent("Solver", "Solve it.")\nb = Agent("Checker", "Check it.")\nsubmit(b(a(task)))\n'


def test_the_control_baseline_is_an_option_of_the_hierarchical_estimator_only():
    cfg = TrainConfig.load(None, ["algo.designer_baseline=control"])
    assert credit_options(cfg)["designer_baseline"] == "control"
    assert "designer_baseline" not in credit_options(TrainConfig.load(None, []))  # the default: today's options
    with pytest.raises(ConfigError, match="does not take it"):
        TrainConfig.load(None, ["algo.designer_baseline=control", "algo.estimator=flat"])
    with pytest.raises(ConfigError, match="no designer to credit"):
        TrainConfig.load(None, ["algo.designer_baseline=control", "rollout.frozen_designer=single_math"])
    with pytest.raises(ConfigError, match="designer_baseline"):
        TrainConfig.load(None, ["algo.designer_baseline=sa"])
    with pytest.raises(ConfigError, match="sum to 1"):
        TrainConfig.load(None, ["rollout.budget.tags=[LOW,HIGH]", "rollout.budget.probs=[0.5,0.2]"])


def _reply(request) -> str:
    """The designer writes one agent (even seeds) or a two-agent pair (odd seeds); an agent delivers on even
    seeds (R = 0.4) and answers untagged on odd ones (R = 0)."""
    if request.role == "designer":
        return f"```python\n{SCRIPT if seed_of(request) % 2 == 0 else PAIR}```"
    return TAGGED if seed_of(request) % 2 == 0 else UNTAGGED


@pytest.mark.slow
def test_train_metaagent_one_step_with_controls_and_budget_tags(tmp_path, monkeypatch):
    from metaagent.cli.train import main

    monkeypatch.setattr(HFPolicy, "_generate", forced_generate(_reply))
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as done:
        main([
            "--config", "tiny", "--model", "tiny", "--steps", "1", "--out", str(out), "--quiet",
            "algo.designer_baseline=control", "rollout.budget.tags=[LOW,HIGH]", "data.val=[]",
            "trainer.save_every=0", "rollout.sandbox_workers=2", "schedule.mode=coupled",
        ])  # fmt: skip
    assert done.value.code in (0, None)
    trees, bad = read_trees(out / "rollouts" / "step_000000.jsonl")
    assert bad == [] and len(trees) == 2
    assert {Task.coerce(t.task).domain for t in trees} == {"math", "code"}  # both selection rules
    for tree in trees:
        assert tree.budget in ("LOW", "HIGH")
        for d in tree.designs:
            assert BUDGET_LINES[tree.budget] in d.sample.messages[-1]["content"]
            if tree.budget == "LOW":
                assert all(len(e.turns) <= 1 for e in d.executions)  # rollout.budget.low_max_calls = 1
        c = tree.control
        assert c is not None and c.select == selection_rule(Task.coerce(tree.task))  # code: public tests
        assert len(c.marks) == len(c.executions)
        assert len(c.executions) == max(k for k, _ in control_baselines(tree))
        assert all(t.synthetic for e in c.executions for t in e.turns) and any(e.turns for e in c.executions)
        assert all(e.reward is not None for e in c.executions)
    (row,) = [r for r in read_metrics(out / "metrics.jsonl")[0] if r["step"] == 0]
    for key in ("credit/control_reward", "credit/design_minus_control", "credit/control_errors",
                "rollout/control_calls", "rollout/control_executions"):  # fmt: skip
        assert key in row, key
    assert row["rollout/control_calls"] == sum(len(e.turns) for t in trees for e in t.control.executions) > 0
    assert any(k.startswith("rollout/budget/") for k in row)
    config = json.loads(json.dumps(__import__("yaml").safe_load((out / "config.yaml").read_text())))
    assert config["algo"]["designer_baseline"] == "control" and config["rollout"]["budget"]["tags"] == ["LOW", "HIGH"]
    # the designer was trained on the control-credited advantages: every sampled design carries one
    assert row["samples/designer"] > 0
