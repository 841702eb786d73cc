"""Experiment trackers (``trainer.loggers``): a tiny two-step run logs to MLflow (local file store) and to
wandb (offline) the same metric keys and values as ``metrics.jsonl``, the config once and a per-step sample
table; a tracker whose package is missing is a one-line error naming the extra to install."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from wandb_offline import config as wandb_config
from wandb_offline import history as wandb_history

from metaagent.errors import MetaAgentError
from metaagent.learn.metrics import MetricsLogger, read_metrics
from metaagent.learn.trackers import TrackerError, mlflow_key, scalars
from metaagent.train.config import TrainConfig

TINY = Path(__file__).parents[2] / "configs" / "tiny.yaml"


@pytest.mark.slow
def test_tiny_run_logs_the_jsonl_metrics_to_mlflow_and_wandb(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient


    from metaagent.train.loop import TrainLoop

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path / 'mlruns'}")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store behind this switch
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    cfg = TrainConfig.load(
        str(TINY),
        [f"trainer.out={out}", "trainer.steps=2", "trainer.save_every=0", "trainer.loggers=[jsonl,wandb,mlflow]",
         "trainer.tracker_project=recipes-test"],
    )  # fmt: skip
    with TrainLoop(cfg) as trainer:
        trainer.train()
        run_id = trainer.run_id
    rows, bad = read_metrics(out / "metrics.jsonl")
    assert not bad and [r["step"] for r in rows] == [0, 1]
    numeric = [scalars({k: v for k, v in r.items() if k != "step"}) for r in rows]
    assert all(len(n) > 30 for n in numeric)
    assert "schedule/active" in rows[0] and "schedule/active" not in numeric[0]  # strings stay in the JSONL

    # MLflow: one run tagged with the run id, every numeric key of every step at its step, the config once
    client = MlflowClient()
    exp = client.get_experiment_by_name("recipes-test")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.tags["metaagent.run_id"] == run_id and run.info.status == "FINISHED"
    parents = {k.rsplit("/", i)[0] for n in numeric for k in n for i in range(1, k.count("/") + 1)}
    names = {mlflow_key(k, parents): k for n in numeric for k in n}
    assert len(names) == len({k for n in numeric for k in n})  # the renaming is one-to-one
    assert set(run.data.metrics) == set(names)
    for name, key in names.items():
        hist = {m.step: m.value for m in client.get_metric_history(run.info.run_id, name)}
        assert hist == {s: n[key] for s, n in enumerate(numeric) if key in n}, key
    logged = json.loads(Path(client.download_artifacts(run.info.run_id, "config.json", str(tmp_path))).read_text())
    assert logged["trainer"]["loggers"] == ["jsonl", "wandb", "mlflow"] and logged["run"]["run_id"] == run_id
    for step in (0, 1):
        sample = json.loads(Path(client.download_artifacts(run.info.run_id, f"samples/step_{step:06d}.json", str(tmp_path))).read_text())
        assert sample["step"] == step and sample["designer"]  # the random tiny model's scripts rarely run:
        assert set(sample) <= {"step", "designer", "agent"}  # an agent reply only when an execution made a call

    # wandb offline: the history rows read back from the run file hold the same keys and values
    hist = wandb_history(out / "wandb")
    assert [h["_step"] for h in hist] == [0, 1]
    for h, n in zip(hist, numeric, strict=True):
        metrics = {k: v for k, v in h.items() if not k.startswith(("_", "rollout/sample_table"))}
        assert metrics == pytest.approx(n), set(metrics) ^ set(n)
        # the table's reference (the table itself is a file of the run): this step's row
        assert h["rollout/sample_table/_type"] == "table-file" and h["rollout/sample_table/nrows"] == 1
    conf = wandb_config(out / "wandb")
    assert conf["run"]["run_id"] == run_id and conf["rollout"]["m_designs"] == 2

    # --resume (here with wandb dropped, which the config hash allows) continues the same MLflow run
    cfg = TrainConfig.load(
        str(TINY),
        [f"trainer.out={out}", "trainer.steps=3", "trainer.save_every=0", "trainer.loggers=[jsonl,mlflow]",
         "trainer.tracker_project=recipes-test"],
    )  # fmt: skip
    with TrainLoop(cfg, resume=True) as trainer:
        assert trainer.start_step == 2 and trainer.run_id == run_id
        trainer.train()
    (again,) = client.search_runs([exp.experiment_id])
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    steps = {m.step for m in client.get_metric_history(run.info.run_id, "rollout/reward/executor")}
    assert steps == {0, 1, 2}


def test_a_missing_tracker_package_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # how Python marks a module that cannot be imported
    with pytest.raises(TrackerError) as e:
        MetricsLogger(tmp_path, loggers=["jsonl", "wandb"], run_id="r1")
    msg = str(e.value)
    assert isinstance(e.value, MetaAgentError) and "\n" not in msg
    assert "pip install 'metaagent[wandb]'" in msg and "trainer.loggers" in msg

    # the trainer checks before it creates the run directory or loads a model
    from metaagent.train.loop import TrainLoop

    out = tmp_path / "run"
    cfg = TrainConfig.load(str(TINY), [f"trainer.out={out}", "trainer.loggers=[jsonl,wandb]"])
    with pytest.raises(TrackerError, match=r"metaagent\[wandb\]"):
        TrainLoop(cfg)
    assert not out.exists()


def test_loggers_config_is_validated_and_tensorboard_false_drops_it():
    from metaagent.config import ConfigError

    with pytest.raises(ConfigError, match="must include 'jsonl'"):
        TrainConfig.load(str(TINY), ["trainer.loggers=[wandb]"])
    with pytest.raises(ConfigError, match="name only"):
        TrainConfig.load(str(TINY), ["trainer.loggers=[jsonl,comet]"])
    cfg = TrainConfig.load(str(TINY), ["trainer.loggers=[jsonl,tensorboard,mlflow]"])
    assert cfg.trainer.tensorboard is False and cfg.trainer.active_loggers() == ["jsonl", "mlflow"]


def test_mlflow_key_keeps_keys_and_renames_only_what_mlflow_refuses():
    assert mlflow_key("rollout/reward/executor") == "rollout/reward/executor"
    assert mlflow_key("val/pass@4") == "val/pass_4"
    assert mlflow_key("train/samples", {"train", "train/samples"}) == "train/samples/all"
