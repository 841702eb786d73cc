"""The reward stages between the rollout and the estimator: which ones a config turns on, and their order."""

from __future__ import annotations

from metaagent.train.config import TrainConfig
from metaagent.train.reward_stages import STAGES, StageContext, active_stages, run_stages


def _names(config: str, *overrides: str) -> list[str]:
    return [s.name for s in active_stages(TrainConfig.load(config, list(overrides)))]


def test_the_default_turns_no_stage_on():
    assert _names("default") == []


def test_each_recipe_turns_on_its_own_stages_in_pipeline_order():
    assert _names("mappa_tiny") == ["coach"]
    assert _names("unity_code_cpu") == ["turn_reward"]
    assert _names("tiny", "algo.estimator=eval_aligned", "optim.dpo=true", "optim.kl_coef=0.001") == ["eval_aligned"]
    # the order is the pipeline's, whatever the order of the settings
    both = _names("unity_code_cpu", "algo.overlong.buffer=16")
    assert both == ["turn_reward", "overlong"]
    assert [s.name for s in STAGES] == ["eval_aligned", "coach", "turn_reward", "overlong"]


def test_a_later_stage_sees_what_an_earlier_one_wrote(monkeypatch):
    import metaagent.train.reward_stages as rs

    seen: list[tuple[str, list]] = []

    def recorder(name):
        def run(ctx, trees):
            seen.append((name, list(trees)))
            trees.append(name)  # an annotation an earlier stage leaves behind
            return {f"{name}/ran": 1.0}

        return run

    monkeypatch.setattr(rs, "STAGES", tuple(rs.Stage(s.name, s.enabled, recorder(s.name)) for s in STAGES))
    cfg = TrainConfig.load("unity_code_cpu", ["algo.overlong.buffer=16"])
    trees: list = []
    metrics = run_stages(StageContext(cfg, engine=None, credit_options={}), trees)
    assert seen == [("turn_reward", []), ("overlong", ["turn_reward"])]
    assert metrics == {"turn_reward/ran": 1.0, "overlong/ran": 1.0}
