"""End to end on a real GPU: verl FSDP actor + vLLM server + metaagent's loop, then conversion to HF.

Skipped on machines without CUDA and vLLM (like the project's CI machine). On a GPU node::

    pip install 'metaagent[gpu]'          # vllm
    pytest tests/verl/test_verl_gpu.py -m slow -s

Uses the embedded SmolLM2-135M-Instruct on one GPU (a few GB of memory, a few minutes).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _gpu_ready() -> bool:
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


pytestmark = [
    pytest.mark.slow,
    pytest.mark.gpu,
    pytest.mark.skipif(not _gpu_ready(), reason="needs a CUDA GPU and vllm (pip install 'metaagent[gpu]')"),
]


def test_two_stagewise_steps_on_one_gpu_then_convert(tmp_path):
    out = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "metaagent.cli.train",
        "--config",
        "default",
        "--backend",
        "verl",
        "--steps",
        "2",
        "--stage-len",
        "1",
        "--out",
        str(out),
        "--quiet",
        "trainer.tensorboard=false",
        "trainer.save_every=2",
        "optim.max_prompt_tokens=2048",
        "optim.max_response_tokens=512",
        "verl.n_gpus_per_node=1",
        "verl.gpu_memory_utilization=0.3",
        "verl.enforce_eager=true",
    ]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["schedule/active"] for x in lines] == ["executor", "designer"]
    assert any("verl/policy/actor/pg_loss" in x for x in lines)
    ckpt = out / "checkpoints" / "step_00000002"
    assert json.loads((ckpt / "meta.json").read_text())["backend"] == "verl"

    hf = tmp_path / "hf"
    r = subprocess.run(
        [sys.executable, "-m", "metaagent.train.verl_backend.convert", str(ckpt), str(hf)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(hf).num_parameters() > 100_000_000
