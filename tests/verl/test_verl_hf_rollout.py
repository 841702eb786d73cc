"""``verl.rollout_name=hf`` on CUDA: verl's FSDP engine with its GPU defaults (FSDP1, bf16, NCCL), the project's
Hugging Face policy as the rollout (what ``verl.device=cpu`` always uses), so the engine can be checked on a
GPU without vLLM (``scripts/gpu_check.sh``). The settings and environment here; the run itself needs a GPU."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from metaagent.config import ConfigError
from metaagent.train.config import TrainConfig
from metaagent.train.verl_backend.device import CPU_ROLLOUT_NAME, HF_ROLLOUT_ENV, process_env
from metaagent.train.verl_backend.plan import format_plan, resolve_plan
from metaagent.train.verl_backend.verl_config import compose_verl_config

AR = "actor_rollout_ref"


def composed(*overrides: str):
    cfg = TrainConfig.load("tiny", ["trainer.backend=verl", "verl.n_gpus_per_node=1", *overrides])
    plan = resolve_plan(cfg)
    return plan, compose_verl_config(cfg, plan, plan.models[0])


def test_hf_rollout_on_cuda_keeps_verls_gpu_engine_and_syncs_into_the_driver():
    plan, c = composed("verl.rollout_name=hf")
    get = lambda k: OmegaConf.select(c, k)  # noqa: E731
    assert plan.verl.hf_rollout and get("trainer.device") == "cuda"
    assert get(f"{AR}.actor.strategy") == "fsdp"  # verl's GPU default, unlike the CPU engine's fsdp2
    assert get(f"{AR}.actor.fsdp_config.mixed_precision") is None  # verl's bf16 default
    assert get(f"{AR}.rollout.name") == CPU_ROLLOUT_NAME
    assert get(f"{AR}.rollout.checkpoint_engine.backend") == "naive"
    assert "Hugging Face policy" in format_plan(plan)
    _, vllm = composed()
    assert OmegaConf.select(vllm, f"{AR}.rollout.name") == "vllm" and not resolve_plan(
        TrainConfig.load("tiny", ["trainer.backend=verl", "verl.n_gpus_per_node=1"])
    ).verl.hf_rollout
    with pytest.raises(ConfigError, match="rollout_name"):
        composed("verl.rollout_name=sglang")


def test_the_environment_tells_every_process_to_register_the_rollout_adapter():
    assert process_env("cuda", True)[HF_ROLLOUT_ENV] == "1"
    assert HF_ROLLOUT_ENV not in process_env("cuda") and HF_ROLLOUT_ENV not in process_env("cpu", True)


@pytest.mark.skipif(
    importlib.util.find_spec("verl") is None or importlib.util.find_spec("ray") is None, reason="needs verl and ray"
)
def test_the_plugin_registers_the_adapter_on_the_cuda_platform():
    """verl imports the plugin itself (VERL_USE_EXTERNAL_MODULES) and keeps its GPU platform."""
    code = (
        "from verl.workers.rollout.base import _ROLLOUT_REGISTRY\n"
        "from verl.plugin.platform import get_platform\n"
        f"print(('{CPU_ROLLOUT_NAME}', 'async') in _ROLLOUT_REGISTRY, get_platform().device_name)\n"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("VERL_PLATFORM", HF_ROLLOUT_ENV)}
    outs = []
    for hf in (True, False):
        env = {**base, **process_env("cuda", hf)}
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        outs.append(r.stdout.split()[-2:])
    assert outs == [["True", "cuda"], ["False", "cuda"]]
