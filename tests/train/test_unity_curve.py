"""benchmarks/unity_code_curve.py: the per-step rows of a code-loop run (validation rows skipped) as JSON and PNG."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "unity_code_curve.py"


def test_curve_keeps_training_steps_and_writes_json_and_png(tmp_path):
    rows = [
        {"step": 0, "rollout/rounds_used": 2.5, "reward/turn/Coder": -0.5, "reward/turn/Planner": -1.0,
         "reward/turn/Reflector": -1.0, "credit/execution_reward_mean": 0.3, "time/step_s": 10.0},
        {"step": 0, "val/reward/executor": 0.1},  # a validation row: no rounds, not a point of the curve
        {"step": 1, "rollout/rounds_used": 2.0, "reward/turn/Coder": 0.25, "reward/turn/Planner": -0.5,
         "reward/turn/Reflector": -1.0, "credit/execution_reward_mean": 0.6, "time/step_s": 9.0},
    ]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "curve"
    subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), str(out)], check=True, capture_output=True)
    curve = json.loads((out / "curve.json").read_text())
    assert [(r["step"], r["rounds_used"], r["Coder"]) for r in curve] == [(0, 2.5, -0.5), (1, 2.0, 0.25)]
    assert (out / "curve.png").read_bytes()[:4] == b"\x89PNG"
