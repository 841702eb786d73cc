"""``train-metaagent --backend verl --dry-run`` through the real CLI in a subprocess, on a machine without GPUs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# runs the CLI in-process, then reports which heavy modules the dry run imported
PROBE = """
import sys
from metaagent.cli.train import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code or 0
heavy = sorted(m for m in ("torch", "ray", "verl", "vllm", "flash_attn", "transformers") if m in sys.modules)
print("HEAVY-MODULES:", ",".join(heavy) or "none")
sys.exit(code)
"""


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_paper_config_dry_run_prints_the_plan_without_any_gpu_import():
    r = cli("--config", "paper_qwen3_8b", "--backend", "verl", "--dry-run")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "HEAVY-MODULES: none" in out  # no torch, Ray, verl, vLLM or flash-attn on this path
    for expected in (
        "policy: Qwen/Qwen3-8B  trains designer, executor",
        "colocated on 8 GPU(s) (FSDP dp=8, 8 vLLM replica(s) x tp=1)",
        "B=8 tasks x M=4 designs x N=4 executions",
        "stagewise, K=30 steps per stage, 300 steps: 0-29 executor, 30-59 designer",
        "vLLM max_model_len = 16384",
        "designer generations: 32; executions: <= 128",
        "rollout.checkpoint_engine.backend = naive",
        "verl estimator 'metaagent_hierarchical'",
    ):
        assert expected in out, expected


def test_single_gpu_config_dry_run():
    r = cli(
        "--config", "single_gpu_qwen3_1_7b", "--dry-run"
    )  # trainer.backend: verl in the file
    assert r.returncode == 0, r.stderr
    assert "HEAVY-MODULES: none" in r.stdout
    assert "1 node(s) x 1 GPU" in r.stdout and "Qwen/Qwen3-1.7B" in r.stdout
    assert "rollout.gpu_memory_utilization = 0.5" in r.stdout


def test_dry_run_with_separate_weights_and_overrides_from_the_command_line():
    r = cli(
        "--config",
        "paper_qwen3_8b",
        "--backend",
        "verl",
        "--dry-run",
        "policy.weights=separate",
        "verl.models={designer: {gpus: 4}, executor: {gpus: 2, rollout_gpus: 2}}",
        "--m-designs",
        "2",
    )
    assert r.returncode == 0, r.stderr
    assert "designer: Qwen/Qwen3-8B  trains designer  [colocated on 4 GPU(s)" in r.stdout
    assert "executor: Qwen/Qwen3-8B  trains executor  [split" in r.stdout
    assert "M=2 designs" in r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["policy.weights=separate"], "say how to place them in verl.models"),
        (["verl.rollout_tp=3"], "multiple of verl.rollout_tp"),
    ],
)
def test_unrunnable_config_exits_2_with_the_fix(args, message):
    r = cli("--config", "paper_qwen3_8b", "--backend", "verl", "--dry-run", *args)
    assert r.returncode == 2
    assert message in r.stderr


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_cuda(), reason="on a GPU machine this would start training")
def test_a_real_run_without_gpus_stops_with_a_clear_message(tmp_path):
    r = cli("--config", "single_gpu_qwen3_1_7b", "--out", str(tmp_path / "run"))
    assert r.returncode == 2
    assert "trains on CUDA GPUs and none is visible here" in r.stderr
    assert not (tmp_path / "run").exists()  # nothing was written before the check
