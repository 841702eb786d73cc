"""The replay tool on a real run directory written by `train-metaagent` (2 steps of the packaged `tiny` config)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from replay_helpers import embedded_pngs, network_references

from metaagent.replay import ReplayError, load_run, render_html, rerun, stats
from metaagent.resources import config_path

REPO = Path(__file__).resolve().parents[2]
TINY_CONFIG = config_path("tiny")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def train_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("train") / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # 2 shared cores: one torch thread decodes far faster
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "metaagent.cli.train",
            "--config",
            str(TINY_CONFIG),
            "--steps",
            "2",
            "--out",
            str(out),
            "trainer.val_every=1",
            "--quiet",
        ],
        cwd=REPO,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def test_training_run_directory_loads_completely(train_run):
    run = load_run(train_run)
    assert run.bad_lines == [] and run.notes == []
    assert run.kinds() == ["train", "val"] and run.steps() == [0, 1]
    assert run.name == json.loads((train_run / "run.json").read_text())["run_id"]
    assert run.config["schedule"]["stage_len"] == 2
    assert [m["step"] for m in run.metrics] == [0, 1]
    for row in run.metrics:  # the train row and the validation row of each step, merged
        assert (
            row["schedule/active"] == "executor"
            and "rollout/reward/designer" in row
            and "val/reward/executor" in row
        )


def test_training_run_statistics_and_report(train_run, tmp_path):
    run = load_run(train_run)
    st = stats(run)
    designs = [d for r in run.refs for d in r.tree.designs]
    invalid = [d for d in designs if not d.valid]
    assert st["designs_by_source"] == {"designer": len(designs)}
    assert st["valid_script_rate"] == pytest.approx(1 - len(invalid) / len(designs))
    assert sum(st["invalid_reasons"].values()) == len(invalid)
    html = render_html(run, tmp_path / "report.html").read_text()
    assert network_references(html) == [] and embedded_pngs(html)
    assert '<img class="plot" alt="reward per role over training steps"' in html
    if not st["workflows"]:  # no valid design: nothing to draw per benchmark, and the report says so
        assert "structure family share per benchmark: no data to plot" in html
    assert "from metrics.jsonl" in html


def test_rerun_of_a_training_run_with_its_own_checkpoint(train_run):
    run = load_run(train_run)
    executed = [(r, d) for r in run.refs if r.kind == "train" for d in r.tree.designs if d.executions]
    if executed:
        ref, design = executed[0]
        res = rerun(run, ref.task_id, str(train_run), design=design.index, step=ref.step, kind="train")
        assert res.recorded == design.executions[0] and res.rerun.status in (
            "ok",
            "error",
            "timeout",
            "limit",
        )
    else:  # the tiny random designer wrote no valid script: nothing to execute, said clearly
        ref = next(r for r in run.refs if r.kind == "train")
        with pytest.raises(ReplayError, match="is invalid .*nothing to execute"):
            rerun(run, ref.task_id, str(train_run), step=ref.step, kind="train")
