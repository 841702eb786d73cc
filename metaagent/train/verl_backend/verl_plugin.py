"""verl plugin module: loaded by verl itself in every process (``VERL_USE_EXTERNAL_MODULES``, see :mod:`.device`).

Always (GPU and CPU):

- **trl guard.** verl 0.9.1's ``apply_monkey_patch`` imports trl's ``AutoModelForCausalLMWithValueHead`` whenever
  trl is installed, at every FSDP engine build; trl >= 1.13 no longer has it, so the build fails with
  ImportError. pyproject pins ``trl<1.13``; for an environment with a newer trl this registers an empty class
  under ``trl.experimental.ppo`` (verl only replaces that class's ``state_dict``; nothing here uses it).

- **value model attention.** verl 0.9.1's ``load_valuehead_model`` (the critic's model, GAE) passes
  ``attn_implementation="flash_attention_2"`` whatever the model config says, so without the flash-attn package
  (CPU, or a GPU install without it) the critic cannot be built. :func:`install_value_model_attention` builds
  the same ``AutoModelForTokenClassification`` with the attention the critic config chose
  (``critic.model.override_config.attn_implementation``, see :mod:`.device`); flash-attention configs keep
  verl's own loader.

- **seeded LoRA.** verl 0.9.1's FSDP engine draws a new LoRA adapter's initial weights (peft's
  ``get_peft_model`` in ``FSDPEngine._build_lora_module``) from torch's generator in whatever state the worker
  process left it: the run's seed did not decide them. :func:`install_seeded_lora` draws them under the
  engine's ``seed`` (``actor.fsdp_config.seed``, which the verl backend sets from ``trainer.seed`` and the
  model's key: :func:`metaagent.seeding.lora_seed`), as the local backend's adapters are. The engine module
  loads peft and FSDP, so it is patched when a process first imports it, not when this plugin loads.

With ``VERL_PLATFORM=cpu`` (``verl.device=cpu``), :func:`install_cpu`:

- a ``cpu`` verl platform: gloo, Ray asks for CPUs and no accelerator, a ``torch.cuda``-like device module over
  ``torch.cpu`` (memory = process RSS);
- where verl 0.9.1 assumes an accelerator: the process-group backend string (``cpu:gloo,cpu:gloo`` is rejected
  by torch), FSDP1's ``sync_module_states`` GPU check, FSDP2's pinned-memory offload of forward-only engines;
- the worker-side rollout :class:`HFWeightsRollout` under the name :data:`.device.CPU_ROLLOUT_NAME`: verl's
  colocated weight sync delivers the actor's weights to it, and the driver's Hugging Face policy takes them
  from there (:mod:`.cpu`). On CUDA the same adapter is registered when ``verl.rollout_name=hf``
  (:data:`.device.HF_ROLLOUT_ENV`, :func:`install_hf_rollout`).

These patches are global inside a process, which is why the CPU verl tests run in a subprocess.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import sys
import types
from contextlib import contextmanager
from typing import Any

import psutil

from metaagent.lazy import after_import
from metaagent.seeding import seeded_torch

from .device import CPU_ROLLOUT_NAME, HF_ROLLOUT_ENV

_installed: set[str] = set()
#: the verl module whose ``FSDPEngine`` builds the LoRA adapter (:func:`install_seeded_lora`)
LORA_ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"


def install_trl_guard() -> None:
    if "trl" in _installed or ("trl" not in sys.modules and importlib.util.find_spec("trl") is None):
        return
    _installed.add("trl")
    for module in ("trl.experimental.ppo", "trl"):
        try:
            if hasattr(__import__(module, fromlist=["_"]), "AutoModelForCausalLMWithValueHead"):
                return
        except ImportError:
            pass
    stub = types.ModuleType("trl.experimental.ppo")
    stub.AutoModelForCausalLMWithValueHead = type("AutoModelForCausalLMWithValueHead", (), {"__module__": __name__})
    sys.modules["trl.experimental.ppo"] = stub


def install_value_model_attention() -> None:
    if "valuehead" in _installed:
        return
    _installed.add("valuehead")
    import verl.utils.model as verl_model

    original = verl_model.load_valuehead_model

    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        attn = getattr(model_config, "_attn_implementation", None)
        if attn in (None, "flash_attention_2"):
            return original(local_path, torch_dtype, model_config, trust_remote_code)
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification.from_pretrained(
            pretrained_model_name_or_path=local_path,
            torch_dtype=torch_dtype,
            config=model_config,
            attn_implementation=attn,
            trust_remote_code=trust_remote_code,
        )

    load_valuehead_model.__wrapped__ = original
    verl_model.load_valuehead_model = load_valuehead_model


def install_seeded_lora() -> None:
    if "lora_seed" in _installed:
        return
    _installed.add("lora_seed")
    after_import(LORA_ENGINE_MODULE, seed_lora_build)


def seed_lora_build(module: Any) -> None:
    """Wrap ``module.FSDPEngine._build_lora_module`` (verl's engine module) so that the adapter it creates draws
    its initial weights under the engine's ``seed`` (module docstring)."""
    original = module.FSDPEngine._build_lora_module

    def _build_lora_module(self, base):
        with seeded_torch(int(self.engine_config.seed)):
            return original(self, base)

    module.FSDPEngine._build_lora_module = _build_lora_module


def _device_module():
    import torch

    rss = staticmethod(lambda *a, **k: psutil.Process().memory_info().rss)
    noop = staticmethod(lambda *a, **k: None)

    class CPUDeviceModule(types.ModuleType):
        """What verl calls on ``get_torch_device()`` (the ``torch.cuda`` API), answered for the CPU."""

        def __getattr__(self, name):
            return getattr(torch.cpu, name)

        is_available = staticmethod(lambda: True)
        device_count = staticmethod(lambda: 1)
        current_device = staticmethod(lambda: 0)
        get_device_name = staticmethod(lambda *a, **k: "cpu")
        set_device = synchronize = empty_cache = ipc_collect = noop
        set_per_process_memory_fraction = reset_peak_memory_stats = noop
        memory_allocated = memory_reserved = rss
        max_memory_allocated = max_memory_reserved = staticmethod(
            lambda *a, **k: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        )
        mem_get_info = staticmethod(
            lambda *a, **k: (psutil.virtual_memory().available, psutil.virtual_memory().total)
        )
        get_rng_state = staticmethod(lambda *a, **k: torch.get_rng_state())
        set_rng_state = staticmethod(lambda state, *a, **k: torch.set_rng_state(state))
        manual_seed = manual_seed_all = staticmethod(lambda seed: torch.manual_seed(seed))

    return CPUDeviceModule("metaagent_verl_cpu_device")


class CPUDeviceId(str):
    """verl's ``get_device_id()`` on CPU. verl uses it as a device (``t.to(id)``, ``FSDP(device_id=id)``, where an
    int would mean cuda:N) and as an index (``torch.device(f"{name}:{id}")`` in FSDP1's checkpointing): its value
    is ``"cpu"``, and it formats as ``"0"``."""

    def __format__(self, spec: str) -> str:
        return "0"


def install_cpu() -> None:
    """The ``cpu`` verl platform and the patches where verl 0.9.1 assumes an accelerator (module docstring)."""
    if "cpu" in _installed:
        return
    _installed.add("cpu")
    _register_cpu_platform()
    _patch_process_group_backend()
    _patch_fsdp1_sync_module_states()
    _patch_fsdp2_offload_unpinned()
    install_hf_rollout()


def _register_cpu_platform() -> None:
    """verl's ``cpu`` platform: gloo, Ray CPUs with no accelerator, a ``torch.cuda``-like module over ``torch.cpu``."""
    import torch
    from verl.plugin.platform import PlatformBase, PlatformRegistry

    device_module, device_id = _device_module(), CPUDeviceId("cpu")

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        device_name = property(lambda self: "cpu")
        vendor_name = property(lambda self: "cpu")
        device_module = property(lambda self: device_module)

        def is_available(self):
            return True

        def is_platform_available(self, use_smi_check=False):
            return os.environ.get("VERL_PLATFORM", "").lower() == "cpu"

        def current_device(self):
            return device_id

        def device_count(self):
            return 1

        def manual_seed(self, seed):
            torch.manual_seed(seed)

        manual_seed_all = manual_seed

        def set_device(self, device_index):
            return None

        def synchronize(self, device_index=None):
            return None

        def set_allocator_settings(self, settings):
            return None

        def empty_cache(self):
            return None

        def get_device_capability(self, device_index=0):
            return None, None

        def communication_backend_name(self):
            return "gloo"

        def visible_devices_envvar(self):
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg):
            yield

        def profiler_start(self):
            return None

        def profiler_stop(self):
            return None

        def ray_resource_name(self):
            return "CPU"

        def ray_resource_options(self, num_gpus):
            return {}  # a CPU worker asks Ray for no accelerator

        def ray_noset_envvars(self):
            return []

        def is_ipc_supported(self):
            return False

        def cudart(self):
            return None


def _patch_process_group_backend() -> None:
    """verl builds the backend f"cpu:gloo,{device}:{backend}" = "cpu:gloo,cpu:gloo": torch refuses the duplicate.
    engine_workers imported this function by name, so its defaults are patched, not the module attribute."""
    from verl.utils import distributed

    distributed.initialize_global_process_group_ray.__defaults__ = (None, "cpu:gloo")


def _patch_fsdp1_sync_module_states() -> None:
    """FSDP1 (actor.strategy=fsdp): verl always passes sync_module_states=True, which FSDP1 refuses for CPU
    parameters (an NCCL guard); gloo broadcasts CPU tensors."""
    from torch.distributed.fsdp import _init_utils

    _init_utils._check_module_states_for_sync_module_states = lambda module_states: None


def _patch_fsdp2_offload_unpinned() -> None:
    """FSDP2 forward-only engines (the KL reference) offload with pinned memory, which needs an accelerator."""
    from verl.utils import fsdp_utils

    class UnpinnedCPUOffloadPolicy(fsdp_utils.CPUOffloadPolicy):
        def __init__(self, pin_memory: bool = True):
            super().__init__(pin_memory=False)

    fsdp_utils.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


def install_hf_rollout() -> None:
    """Register :class:`HFWeightsRollout` with verl's rollout registry (the Hugging Face rollout's worker side)."""
    if "hf_rollout" in _installed:
        return
    _installed.add("hf_rollout")
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY

    _ROLLOUT_REGISTRY[(CPU_ROLLOUT_NAME, "async")] = f"{__name__}.HFWeightsRollout"


def __getattr__(name: str):
    if name == "HFWeightsRollout":  # built on first use: verl's rollout base class imports torch and verl
        return _rollout_class()
    raise AttributeError(name)


_ROLLOUT_CLASS: list = []


def _rollout_class():
    if _ROLLOUT_CLASS:
        return _ROLLOUT_CLASS[0]
    from verl.workers.rollout.base import BaseRollout

    class HFWeightsRollout(BaseRollout):
        """The colocated rollout engine of a CPU worker: generates nothing, keeps the weights verl's naive sync
        sends (``ActorRolloutRefWorker.update_weights``: resume weights -> update_weights -> resume kv_cache),
        for the driver's Hugging Face policy to take (:meth:`take`)."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.weights: dict | None = None
            self.version = 0
            self.awake: set[str] = set()

        async def resume(self, tags):
            self.awake.update(tags)

        async def release(self):
            self.awake.clear()

        async def update_weights(self, weights, wire_format="named_tensors", **kwargs):
            if wire_format != "named_tensors":
                raise ValueError(f"the CPU rollout takes full named tensors, not {wire_format!r}")
            state = {}
            if hasattr(weights, "__aiter__"):
                async for name, tensor in weights:
                    state[name] = tensor.detach().to("cpu", copy=True)
            else:
                for name, tensor in weights:
                    state[name] = tensor.detach().to("cpu", copy=True)
            self.weights, self.version = state, self.version + 1

        def take(self) -> tuple[int, dict | None]:
            weights, self.weights = self.weights, None
            return self.version, weights

    _ROLLOUT_CLASS.append(HFWeightsRollout)
    return HFWeightsRollout


install_trl_guard()
install_value_model_attention()
install_seeded_lora()
if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    install_cpu()
elif os.environ.get(HF_ROLLOUT_ENV) == "1":
    install_hf_rollout()
