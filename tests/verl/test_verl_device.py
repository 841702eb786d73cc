"""``verl.device`` and ``verl.attn_implementation``: the verl settings each device composes (no verl import)."""

from __future__ import annotations

import importlib.util

import pytest
from omegaconf import OmegaConf

from metaagent.config import ConfigError
from metaagent.train.config import TrainConfig
from metaagent.train.verl_backend.device import CPU_ROLLOUT_NAME, attn_implementation, process_env
from metaagent.train.verl_backend.plan import resolve_plan
from metaagent.train.verl_backend.verl_config import compose_verl_config

AR = "actor_rollout_ref"


def composed(*overrides: str):
    cfg = TrainConfig.load("tiny", ["trainer.backend=verl", "verl.n_gpus_per_node=1", *overrides])
    plan = resolve_plan(cfg)
    return compose_verl_config(cfg, plan, plan.models[0])


def test_cpu_device_composes_a_runnable_exact_cpu_engine():
    c = composed("verl.device=cpu", "optim.kl_coef=0.1")
    get = lambda k: OmegaConf.select(c, k)  # noqa: E731
    assert get("trainer.device") == "cpu"
    assert get(f"{AR}.actor.strategy") == "fsdp2"  # FSDP1's reference model pins memory
    assert get(f"{AR}.ref.strategy") == "fsdp2"
    assert get(f"{AR}.model.override_config.attn_implementation") == "sdpa"
    assert get(f"{AR}.actor.fsdp_config.use_torch_compile") is False
    fp32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    assert OmegaConf.to_container(get(f"{AR}.actor.fsdp_config.mixed_precision")) == fp32
    assert OmegaConf.to_container(get(f"{AR}.ref.fsdp_config.mixed_precision")) == fp32
    assert get(f"{AR}.rollout.name") == CPU_ROLLOUT_NAME
    assert get(f"{AR}.rollout.checkpoint_engine.backend") == "naive"


def test_cuda_device_keeps_verls_gpu_defaults_but_picks_attention_by_what_is_installed():
    c = composed()
    assert OmegaConf.select(c, "trainer.device") == "cuda"
    assert OmegaConf.select(c, f"{AR}.actor.strategy") == "fsdp"
    assert OmegaConf.select(c, f"{AR}.actor.fsdp_config.mixed_precision") is None  # verl's bf16 default
    expected = "flash_attention_2" if importlib.util.find_spec("flash_attn") else "sdpa"
    assert OmegaConf.select(c, f"{AR}.model.override_config.attn_implementation") == expected
    assert OmegaConf.select(composed("verl.attn_implementation=eager"), f"{AR}.model.override_config.attn_implementation") == "eager"


def test_a_user_override_beats_the_device_setting():
    c = composed("verl.device=cpu", f"verl.overrides=['+{AR}.model.override_config.attn_implementation=eager']")
    assert OmegaConf.select(c, f"{AR}.model.override_config.attn_implementation") == "eager"


def test_attention_choice_and_refusals():
    assert attn_implementation("auto", "cpu") == "sdpa"
    assert attn_implementation("sdpa", "cuda") == "sdpa"
    with pytest.raises(ConfigError, match="needs CUDA"):
        resolve_plan(TrainConfig.load("tiny", ["trainer.backend=verl", "verl.device=cpu", "verl.attn_implementation=flash_attention_2"]))
    with pytest.raises(ConfigError, match="verl.device"):
        resolve_plan(TrainConfig.load("tiny", ["trainer.backend=verl", "verl.device=tpu"]))


def test_every_verl_process_loads_the_plugin_and_cpu_selects_its_platform():
    assert process_env("cuda")["VERL_USE_EXTERNAL_MODULES"] == "metaagent.train.verl_backend.verl_plugin"
    assert "VERL_PLATFORM" not in process_env("cuda")
    assert process_env("cpu")["VERL_PLATFORM"] == "cpu"
    assert importlib.util.find_spec(process_env("cpu")["VERL_USE_EXTERNAL_MODULES"]) is not None


def test_trl_guard_gives_verl_the_class_a_newer_trl_removed(monkeypatch):
    """verl's FSDP engine build imports trl's AutoModelForCausalLMWithValueHead whenever trl is installed."""
    import sys
    import types

    from metaagent.train.verl_backend import verl_plugin

    monkeypatch.setitem(sys.modules, "trl", types.ModuleType("trl"))  # a trl >= 1.13: neither place has it
    monkeypatch.setitem(sys.modules, "trl.experimental", types.ModuleType("trl.experimental"))
    monkeypatch.setitem(sys.modules, "trl.experimental.ppo", types.ModuleType("trl.experimental.ppo"))
    monkeypatch.setattr(verl_plugin, "_installed", set())
    verl_plugin.install_trl_guard()
    stand_in = sys.modules["trl.experimental.ppo"].AutoModelForCausalLMWithValueHead
    assert stand_in.__module__ == verl_plugin.__name__  # the guard's class, not trl's


def test_the_pinned_trl_still_has_the_class_verl_imports():
    pytest.importorskip("trl")
    try:
        from trl.experimental.ppo import AutoModelForCausalLMWithValueHead  # noqa: F401
    except ImportError:
        from trl import AutoModelForCausalLMWithValueHead  # noqa: F401
