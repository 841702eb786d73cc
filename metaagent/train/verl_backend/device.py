"""Where verl's workers run: the settings and process environment of ``verl.device`` (``cuda`` or ``cpu``).

Pure (imports neither torch nor verl), so ``--dry-run`` shows the same settings a real run uses.

``cpu`` runs verl 0.9.1's real FSDP training engine (``ActorRolloutRefWorker`` -> ``FSDPEngineWithLMHead``)
on CPU worker processes with the gloo backend. verl has no CPU platform, so :mod:`.verl_plugin` registers one;
verl imports that module itself in every process (driver and Ray workers) because :func:`process_env` names it
in ``VERL_USE_EXTERNAL_MODULES``. The settings below make the engine runnable and exact on CPU:

- ``fsdp2``: FSDP1's forward-only reference model pins memory, which needs an accelerator;
- ``sdpa`` attention (flash-attn is CUDA only), no ``torch.compile`` (inductor), verl's ``naive`` checkpoint
  engine (NCCL needs GPUs);
- fp32 FSDP mixed precision: verl's default bf16 autocast puts its log-probs ~5e-2 away from the fp32 rollout.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

PLUGIN_MODULE = "metaagent.train.verl_backend.verl_plugin"
#: the name of the worker-side rollout adapter :mod:`.verl_plugin` registers with verl for the Hugging Face rollout
#: (``device=cpu``, or ``rollout_name=hf`` on CUDA)
CPU_ROLLOUT_NAME = "metaagent_hf"
#: environment variable that makes every verl process register that adapter on CUDA (on CPU it always is)
HF_ROLLOUT_ENV = "METAAGENT_VERL_HF_ROLLOUT"
FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def attn_implementation(choice: str, device: str) -> str:
    """The attention kernel the actor builds its model with (``verl.attn_implementation``).

    verl 0.9.1 defaults to ``flash_attention_2`` and fails with ImportError without the flash-attn package,
    which only builds against CUDA; ``auto`` takes it only when it is installed.
    """
    if choice != "auto":
        return choice
    if device == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def device_settings(device: str, attn: str, *, colocated: bool, hf_rollout: bool = False) -> dict[str, Any]:
    """Dotted verl keys for ``device`` (and the Hugging Face rollout, always on CPU); a leading ``+`` adds a key
    verl's config does not declare."""
    ar = "actor_rollout_ref"
    settings: dict[str, Any] = {
        "trainer.device": device,
        f"+{ar}.model.override_config.attn_implementation": attn_implementation(attn, device),
    }
    if device == "cpu":
        settings.update({
            f"{ar}.actor.strategy": "fsdp2",
            f"{ar}.actor.fsdp_config.use_torch_compile": False,
            f"{ar}.ref.fsdp_config.use_torch_compile": False,
            f"+{ar}.actor.fsdp_config.mixed_precision": dict(FP32),
            f"+{ar}.ref.fsdp_config.mixed_precision": dict(FP32),
        })  # fmt: skip
    if device == "cpu" or hf_rollout:  # the weights reach the driver's HF policy, never a vLLM server
        settings.update({f"{ar}.rollout.name": CPU_ROLLOUT_NAME, f"{ar}.rollout.checkpoint_engine.backend": "naive"})
    return settings


def critic_device_settings(device: str, attn: str) -> dict[str, Any]:
    """Dotted verl keys of the critic (``critic.*``) for ``device``: the actor's knobs, for the value model."""
    settings: dict[str, Any] = {"+critic.model.override_config.attn_implementation": attn_implementation(attn, device)}
    if device == "cpu":
        settings.update({
            "critic.strategy": "fsdp2",
            "critic.fsdp.use_torch_compile": False,
            "+critic.fsdp.mixed_precision": dict(FP32),
        })  # fmt: skip
    return settings


def process_env(device: str, hf_rollout: bool = False) -> dict[str, str]:
    """Environment of the driver and of every Ray worker: verl loads :mod:`.verl_plugin` in each process.

    On CPU it also selects the plugin's platform, and lets verl's engine registry (FSDP is registered for
    cuda/npu only; the FSDP code itself is device-agnostic) hand out the FSDP engine. With the Hugging Face
    rollout on CUDA it tells the plugin to register the worker-side rollout adapter.
    """
    env = {"VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE, "TRL_EXPERIMENTAL_SILENCE": "1"}
    if device == "cpu":
        env.update(VERL_PLATFORM="cpu", VERL_ENGINE_DEVICE="cuda", TOKENIZERS_PARALLELISM="false")
    elif hf_rollout:
        env[HF_ROLLOUT_ENV] = "1"
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]  # workers import this checkout's metaagent
    return env
