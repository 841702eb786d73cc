"""``verl.device=cpu``: verl's real FSDP engine on CPU workers, this project's Hugging Face policy as the rollout
(also on CUDA with ``verl.rollout_name=hf``: the FSDP engine on GPUs, checked without vLLM).

What :class:`~.workers.ModelGroup` gets on CPU in place of the GPU pieces (its ``start`` seams):

- :func:`cpu_pool`: a Ray resource pool of CPU bundles (verl's ``ResourcePoolManager`` always asks for GPUs);
- :class:`HFRollout`: generation by :class:`metaagent.policy.HFPolicy` in the driver (fp32, sdpa), with the
  token log-probs of the Policy contract. After every update the actor's weights reach it:
  colocated placement (roles ``actor_rollout``/``actor_rollout_ref``) through verl's own naive weight sync
  (``CheckpointEngineManager.update_weights`` -> the worker's rollout engine :class:`.verl_plugin.HFWeightsRollout`),
  split placement (role ``actor``) pulled from the FSDP engine (``get_per_tensor_param``).

:func:`activate` prepares the driver process; verl resolves its platform once per process, so a process that
already used verl on another platform cannot switch (run the CPU backend in a fresh process).
"""

from __future__ import annotations

import os
from typing import Any

from metaagent.policy.factory import build_policy

from .device import process_env
from .errors import VerlBackendError


def activate(device: str, hf_rollout: bool = False) -> dict[str, str]:
    """Set this process's environment for ``device`` and load the plugin; returns the env for Ray workers."""
    env = process_env(device, hf_rollout)
    prior = os.environ.get("VERL_USE_EXTERNAL_MODULES", "")
    if prior and env["VERL_USE_EXTERNAL_MODULES"] not in prior.split(","):
        env["VERL_USE_EXTERNAL_MODULES"] = f"{prior},{env['VERL_USE_EXTERNAL_MODULES']}"
    os.environ.update(env)
    from . import verl_plugin

    verl_plugin.install_trl_guard()
    if hf_rollout:
        verl_plugin.install_hf_rollout()
    if device == "cpu":
        verl_plugin.install_cpu()
        from verl.plugin.platform import get_platform

        name = get_platform().device_name
        if name != "cpu":
            raise VerlBackendError(
                f"verl already chose the {name!r} platform in this process; verl.device=cpu needs a fresh process "
                "(start train-metaagent anew, or run the code in a subprocess)"
            )
    return env


def cpu_pool(workers: int) -> Any:
    """A Ray pool of ``workers`` CPU worker processes on one node (one CPU bundle each)."""
    from verl.single_controller.ray import RayResourcePool

    # max_colocate_count=1: each bundle asks for that many CPUs (verl's default 10 is never placed on a small box)
    return RayResourcePool(process_on_nodes=[workers], use_gpu=False, max_colocate_count=1)


class HFRollout:
    """The Hugging Face rollout of one physical model (module docstring), fp32.

    Args:
        group: the started model group (``wg``, ``plan``, ``config``, ``tokenizer``, ``role``).
        chat_template_kwargs: extra ``apply_chat_template`` arguments of the policy.
        max_batch_size: rows the HF policy generates at once.
        device: where the driver's policy runs (``cpu``, or ``cuda`` beside the FSDP workers).
    """

    def __init__(
        self, group: Any, chat_template_kwargs: dict[str, Any] | None = None, *, max_batch_size: int = 32,
        device: str = "cpu",
    ) -> None:
        self.group = group
        self.colocated = group.plan.colocated
        path = group.plan.path
        # fp32 weights read from the plan's path (the one builder's loader), served with the group's tokenizer
        self.policy = build_policy(
            "hf", path, tokenizer=group.tokenizer, device=device, model_id=path,
            chat_template_kwargs=chat_template_kwargs, max_batch_size=max_batch_size,
        )  # fmt: skip
        self.model = self.policy.model
        self.tied = {k for k in self.model.state_dict() if k.endswith("lm_head.weight")} if getattr(
            self.model.config, "tie_word_embeddings", False
        ) else set()
        self.sync = None
        if self.colocated:
            from verl.checkpoint_engine import CheckpointEngineManager
            from verl.utils.config import omega_conf_to_dataclass

            engine = omega_conf_to_dataclass(group.config.actor_rollout_ref.rollout.checkpoint_engine)
            self.sync = CheckpointEngineManager(config=engine, actor_wg=group.wg, replicas=[])
        self.version = 0

    def _on_workers(self, fn) -> list[Any]:
        """``fn(worker)`` on every worker of the group (collectives need all ranks); their results by rank."""
        import ray

        role = self.group.role

        def call(fused):
            return fn(fused.worker_dict[role])

        return ray.get([w.execute_with_func_generator.remote(call) for w in self.group.wg.workers])

    def sync_weights(self, step: int) -> dict[str, float]:
        if self.colocated:  # verl's own colocated sync delivers the weights to the workers' rollout engine
            metrics = self.sync.update_weights(global_steps=step) or {}
            version, state = self._on_workers(lambda w: w.rollout.take())[0]
            if state is None or version <= self.version:
                raise VerlBackendError("verl's weight sync delivered no new weights to the CPU rollout")
            self.version = version
        else:  # split: the full weights gathered from the FSDP engine
            metrics = {}
            state = self._on_workers(
                lambda w: {k: v.detach().to("cpu", copy=True) for k, v in w.actor.engine.get_per_tensor_param()[0]}
            )[0]
            self.version += 1
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected or set(missing) - self.tied:
            raise VerlBackendError(
                f"the actor's weights do not fit the rollout model: missing {sorted(missing)[:5]}, unexpected "
                f"{sorted(unexpected)[:5]}"
            )
        if self.tied:
            self.model.tie_weights()
        return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}

    def sleep(self) -> None:
        if self.sync is not None:
            self.sync.sleep_replicas()

    def close(self) -> None:
        self.policy.close()
