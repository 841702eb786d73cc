"""The trainer's ``val/`` metrics are metaagent-eval's numbers: the same tasks and seed give the same
avg@k / pass@k (and CIs) through ``TrainLoop.validate`` and through an ``auto`` evaluation."""

from __future__ import annotations

import pytest
from test_eval_run import MATH, reply

from metaagent.eval import Evaluation, make_config
from metaagent.learn.metrics import MetricsLogger
from metaagent.policy import ScriptedPolicy
from metaagent.rollout.engine import RolloutEngine, derive_seed
from metaagent.train.config import TrainConfig
from metaagent.train.loop import TrainLoop
from metaagent.train.run_dir import RunDirectory
from metaagent.workflow import SandboxPool


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


def test_validation_metrics_equal_the_eval_harness(tmp_path, pool):
    cfg = TrainConfig.load(
        None,
        [
            "trainer.val_every=1",
            "trainer.val_repeats=2",
            "trainer.val_greedy=true",
            "trainer.seed=7",
            "trainer.tensorboard=false",
            f"trainer.out={tmp_path / 'run'}",
            "rollout.k_templates=1",
        ],
    )
    policy = ScriptedPolicy(reply, model_id="scripted")
    loop = TrainLoop.__new__(TrainLoop)  # validate() needs only the config, engine, val tasks and log
    loop.config = cfg
    loop.run = RunDirectory(tmp_path / "run")
    loop.val_tasks = MATH
    loop.engine = RolloutEngine(policy, policy, cfg.rollout, pool=pool, reward_config=cfg.reward_config())
    loop.logger = MetricsLogger(loop.run.path, tensorboard=False)
    val = loop.validate(0)
    loop.logger.close()

    ev = make_config(
        models=["scripted"],
        methods=["auto"],
        benchmarks=["bundled:test/math"],
        limit=len(MATH),
        n=cfg.trainer.val_repeats,
        k=[1, 2],
        seed=derive_seed(cfg.trainer.seed, "val"),
        temperature=0.0,
        k_templates=cfg.rollout.k_templates,
        designer_max_tokens=cfg.rollout.designer.max_tokens,
        executor_max_tokens=cfg.rollout.executor.max_tokens,
        out=str(tmp_path / "eval"),
        html=False,
    )
    results = Evaluation(ev, policies={"scripted": policy}, pool=pool).run()
    metrics = results["cells"]["scripted"]["benchmarks"]["bundled:test/math"]["auto"]["metrics"]
    for name in ("avg@1", "avg@2", "pass@1", "pass@2", "maj@2"):
        assert val[f"val/{name}"] == metrics[name]["mean"], name
        assert [val[f"val/{name}/ci_low"], val[f"val/{name}/ci_high"]] == metrics[name]["ci95"], name
    assert val["val/avg@2"] == 0.5  # one task solved, one not: the numbers are not trivially equal
    assert val["val/valid_script_rate"] == 1.0
