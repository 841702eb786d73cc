"""One physical model driven through upstream verl: FSDP actor, rollout servers, weight sync.

Per physical model (``ModelPlan``):

- a Ray resource pool and a ``RayWorkerGroup`` of verl's ``ActorRolloutRefWorker`` (the FSDP training
  engine; role ``actor_rollout`` when vLLM is colocated, ``actor_rollout_ref`` when a KL reference is
  needed, ``actor`` when vLLM runs on its own GPUs). With LoRA (``policy.lora``) the reference is the
  actor itself with its adapter off, as verl's own trainer does (``ref_in_actor``): no reference worker;
- verl's ``LLMServerManager``: vLLM async server replicas, hybrid on the actor's GPUs or standalone, and the
  ``LLMServerClient`` that the :class:`~.policy.ServerPolicy` of this model sends requests through;
- verl's ``CheckpointEngineManager``: after every update the new weights go to the replicas (in place for
  colocated replicas, through NCCL/NIXL/... for standalone ones);
- with a critic (GAE: ``critic.enable``), verl's critic ``TrainingWorker`` (a value model) colocated with the actor
  in the same worker processes, as verl's trainer and the UnityMAS-O authors' per-model worker groups place it:
  ``critic_values`` (``infer_batch``) and ``update_critic`` (``train_mini_batch`` on verl's clipped value loss).

This is the same composition verl's own trainer builds in ``PPOTrainer._setup`` (verl 0.9.1,
``verl/trainer/ppo/v1/trainer_base.py``), without its dataloader, reward loop and agent loop: metaagent's
rollout engine produces the data. Everything here imports verl lazily. On GPUs ``start()`` builds all of the above;
with ``verl.device=cpu`` its seams take a CPU resource pool and :class:`.cpu.HFRollout` (the Hugging Face
policy, synced from the actor) instead of vLLM.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from metaagent.train.backend_sections import VerlConfig

from .batch import (
    UpdateBatch,
    add_rollout_correction,
    critic_tensordict,
    logprob_tensordict,
    update_tensordict,
)
from .errors import VerlBackendError
from .plan import ModelPlan
from .policy import ServerPolicy

CRITIC = "critic"  # the critic's name in the colocated worker class (verl: str(Role.Critic))


def pool_spec(gpus: int, gpus_per_node: int) -> list[int]:
    """Per-node GPU counts of a Ray resource pool of ``gpus`` GPUs."""
    if gpus <= gpus_per_node:
        return [gpus]
    if gpus % gpus_per_node:
        raise VerlBackendError(
            f"{gpus} GPUs span nodes but are not a multiple of {gpus_per_node} GPUs per node"
        )
    return [gpus_per_node] * (gpus // gpus_per_node)


class ModelGroup:
    """The verl side of one physical model (module docstring).

    Args:
        plan: where the model runs.
        config: verl's composed ``ppo_trainer`` config for it (:func:`.verl_config.compose_verl_config`).
        verl: the backend settings.
        tokenizer: the model's tokenizer (chat template, pad id).
        seed: base seed of verl's mini-batch iterator.
        chat_template_kwargs: the run's ``policy.chat_template_kwargs`` (``verl.chat_template_kwargs`` wins).
    """

    def __init__(
        self,
        plan: ModelPlan,
        config: Any,
        verl: VerlConfig,
        tokenizer: Any,
        *,
        seed: int = 0,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.policy_chat_template_kwargs = chat_template_kwargs
        self.plan = plan
        self.config = config
        self.verl = verl
        self.tokenizer = tokenizer
        self.seed = seed
        self.use_ref = bool(config.actor_rollout_ref.actor.use_kl_loss)
        self.ref_in_actor = self.use_ref and ref_in_actor(config)
        self.use_critic = bool(config.critic.get("enable") or False)
        self.wg: Any = None
        self.critic_wg: Any = None
        self.rollout: Any = None
        self.policy: Any = None
        self.dp_size = plan.dp_size
        self._awake = True

    @property
    def key(self) -> str:
        return self.plan.key

    @property
    def pad_id(self) -> int:
        pad = getattr(self.tokenizer, "pad_token_id", None)
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    # ------------------------------------------------------------------------------------------- start
    @property
    def role(self) -> str:
        """verl's worker role: ``actor_rollout(_ref)`` when the rollout is colocated, else ``actor``; no ``_ref``
        when the reference is the actor's own base (LoRA, :func:`ref_in_actor`)."""
        if self.plan.colocated:
            return "actor_rollout_ref" if self.use_ref and not self.ref_in_actor else "actor_rollout"
        return "actor"

    def start(
        self,
        *,
        pool: Any = None,
        device_name: str = "cuda",
        rollout: Callable[[ModelGroup, Any], Any] | None = None,
    ) -> None:
        """Spawn the worker group, build the FSDP engine, then the rollout side and its weight sync.

        The seams (defaults: GPUs): ``pool``, a verl Ray resource pool (default: the plan's GPUs through verl's
        ``ResourcePoolManager``); ``device_name`` of the workers; ``rollout(group, pool)`` builds the object that
        generates and receives the weights (``policy``, ``sync_weights(step)``, ``sleep()``, ``close()``;
        default :class:`VLLMRollout`, on CPU :class:`.cpu.HFRollout`).
        """
        import ray
        from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup
        from verl.single_controller.ray.base import create_colocated_worker_cls
        from verl.workers.engine_workers import ActorRolloutRefWorker

        plan, cfg, role = self.plan, self.config, self.role
        if pool is None:
            pool = self._gpu_pool()
        worker = RayClassWithInitArgs(cls=ray.remote(ActorRolloutRefWorker), config=cfg.actor_rollout_ref, role=role)
        classes = {role: worker}
        if self.use_critic:  # the value model shares the actor's processes (verl's trainer, the authors' code)
            from verl.workers.engine_workers import TrainingWorker

            critic_worker, critic_cfg = self._critic_worker()
            classes[CRITIC] = RayClassWithInitArgs(cls=ray.remote(TrainingWorker), config=critic_worker)
        group = RayWorkerGroup(
            resource_pool=pool,
            ray_cls_with_init=create_colocated_worker_cls(class_dict=classes),
            device_name=device_name,
        )
        spawned = group.spawn(prefix_set=set(classes))
        self.wg = spawned[role]
        if self.use_critic:  # as verl's PPOTrainer._setup: engine up, then verl's value loss with our critic config
            from verl.workers.utils.losses import value_loss

            self.critic_wg = spawned[CRITIC]
            self.critic_wg.reset()
            self.critic_wg.set_loss_fn(partial(value_loss, config=critic_cfg))
        self.wg.init_model()
        self.dp_size = max(self.wg._query_dispatch_info("actor")) + 1
        if self.dp_size != plan.dp_size:
            raise VerlBackendError(
                f"model {plan.key}: verl reports {self.dp_size} data-parallel ranks, the plan expected {plan.dp_size}"
            )
        self.rollout = (rollout or VLLMRollout)(self, pool)
        self.policy = self.rollout.policy
        if plan.colocated:
            self.rollout.sleep()  # as verl does: replicas sleep until the first weight sync wakes them
            self._awake = False

    def _critic_worker(self) -> tuple[Any, Any]:
        """verl's ``TrainingWorkerConfig`` of the value model and the ``CriticConfig`` it came from (as verl's
        ``PPOTrainer._setup``, with the engine's micro-batch budgets taken from the critic section)."""
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.engine_workers import TrainingWorkerConfig

        critic = omega_conf_to_dataclass(self.config.critic)
        critic.engine.max_token_len_per_gpu = critic.ppo_max_token_len_per_gpu
        critic.engine.infer_max_token_len_per_gpu = critic.forward_max_token_len_per_gpu
        worker = TrainingWorkerConfig(
            model_type="value_model",
            model_config=critic.model,
            engine_config=critic.engine,
            optimizer_config=critic.optim,
            checkpoint_config=critic.checkpoint,
        )
        return worker, critic

    def _gpu_pool(self) -> Any:
        from verl.single_controller.ray import ResourcePoolManager

        pool_name = f"metaagent_{self.plan.key}"
        pools = ResourcePoolManager(
            resource_pool_spec={pool_name: pool_spec(self.plan.gpus, self.verl.n_gpus_per_node)},
            mapping={self.role: pool_name},
        )
        pools.create_resource_pool()
        return pools.get_resource_pool(self.role)

    def chat_template_kwargs(self) -> dict[str, Any] | None:
        """``verl.chat_template_kwargs``, else the run's ``policy.chat_template_kwargs``."""
        if self.verl.chat_template_kwargs is not None:
            return self.verl.chat_template_kwargs
        return self.policy_chat_template_kwargs

    # ------------------------------------------------------------------------------------- weights & data
    def sync_weights(self, step: int) -> dict[str, float]:
        """Send the actor's weights to the rollout (and wake colocated replicas)."""
        metrics = self.rollout.sync_weights(step)
        self._awake = True
        return {f"verl/{self.key}/sync/{k}": float(v) for k, v in metrics.items()}

    def free_rollout_memory(self) -> None:
        """Colocated: put the rollout to sleep (weights and KV cache released) so the update has the memory."""
        if self.plan.colocated and self._awake:
            self.rollout.sleep()
            self._awake = False

    def actor_log_probs(self, batch: UpdateBatch) -> Any:
        """The actor's log-probs of the batch's responses, ``(B, R)`` fp32, 0 outside the response mask."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import no_padding_2_padding

        td = logprob_tensordict(batch)
        out = self.wg.compute_log_prob(td)
        return no_padding_2_padding(tu.get(out, "log_probs"), td).float() * batch.data.batch["response_mask"]

    def recompute_old_log_probs(self, batch: UpdateBatch) -> None:
        """``verl.old_log_prob=recompute``: pi_old from the actor; the rollout log-probs move to ``rollout_log_probs``."""
        data = batch.data.batch
        log_probs = self.actor_log_probs(batch)
        data["rollout_log_probs"] = data["old_log_probs"]
        data["old_log_probs"] = log_probs

    def reference_log_probs(self, batch: UpdateBatch) -> None:
        """KL term: the frozen reference model's log-probs as ``ref_log_prob``; with LoRA the actor's forward
        with its adapter off (verl's ``_compute_ref_log_prob`` when ``ref_in_actor``: ``no_lora_adapter``)."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import no_padding_2_padding

        td = logprob_tensordict(batch)
        if self.ref_in_actor:
            tu.assign_non_tensor(td, no_lora_adapter=True)
            out = self.wg.compute_log_prob(td)
        else:
            out = self.wg.compute_ref_log_prob(td)
        batch.data.batch["ref_log_prob"] = no_padding_2_padding(tu.get(out, "log_probs"), td).float()

    def update(self, batch: UpdateBatch, *, step: int) -> dict[str, float]:
        """One optimizer step of the FSDP actor on ``batch`` (``update_actor``); verl's metrics as ``actor/*``."""
        from verl.utils import tensordict_utils as tu
        from verl.utils.metric import reduce_metrics
        from verl.utils.py_functional import rename_dict

        if batch.dp_size != self.dp_size:
            raise VerlBackendError(
                f"batch was built for dp_size={batch.dp_size}, model {self.key} has {self.dp_size}"
            )
        checked: dict[str, float] = {}
        if self.verl.logprob_check and self.verl.old_log_prob != "recompute":
            checked = rollout_logprob_diff(batch.data.batch, self.actor_log_probs(batch))
        corrected: dict[str, float] = {}
        if self.verl.old_log_prob == "recompute":
            self.recompute_old_log_probs(batch)
            data = batch.data.batch
            checked = rollout_logprob_diff(data, data["old_log_probs"], data["rollout_log_probs"])
            # as verl's trainer in decoupled mode: IS weights (optim.tis_cap) and the mismatch metrics
            corrected = add_rollout_correction(batch, self.config.algorithm.rollout_correction)
        if self.use_ref:
            self.reference_log_probs(batch)
        td = update_tensordict(
            batch,
            calculate_entropy=bool(self.config.actor_rollout_ref.actor.calculate_entropy),
            seed=self.seed + step,
        )
        output = self.wg.update_actor(td)
        metrics = rename_dict(tu.get(output, "metrics"), "actor/") | checked
        metrics = reduce_metrics(metrics) | corrected
        return {f"verl/{self.key}/{k}": float(v) for k, v in metrics.items() if _number(v)}

    # ----------------------------------------------------------------------------------------------- critic
    def critic_values(self, batch: UpdateBatch) -> Any:
        """The critic's values ``V_t`` of the batch's response tokens, ``(B, R)`` fp32, 0 outside the response
        mask (verl's ``_compute_values``: ``infer_batch`` on the value model, read where log-probs are read)."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import no_padding_2_padding

        self._need_critic()
        td = logprob_tensordict(batch)
        out = _resolved(self.critic_wg.infer_batch(td))
        return no_padding_2_padding(tu.get(out, "values"), td).float() * batch.data.batch["response_mask"]

    def update_critic(self, batch: UpdateBatch, *, step: int) -> dict[str, float]:
        """One optimizer step of the critic on the batch's ``values`` (V_old) and ``returns`` (the targets),
        verl's clipped value loss (``train_mini_batch``); verl's metrics, without the ``critic/`` prefix."""
        from verl.utils import tensordict_utils as tu
        from verl.utils.metric import reduce_metrics

        self._need_critic()
        if batch.dp_size != self.dp_size:
            raise VerlBackendError(f"batch was built for dp_size={batch.dp_size}, model {self.key} has {self.dp_size}")
        out = _resolved(self.critic_wg.train_mini_batch(critic_tensordict(batch, seed=self.seed + step)))
        metrics = {k.removeprefix("critic/"): v for k, v in tu.get(out, "metrics").items()}
        return {k: float(v) for k, v in reduce_metrics(metrics).items() if _number(v)}

    def _need_critic(self) -> None:
        if self.critic_wg is None:
            raise VerlBackendError(f"model {self.key} has no critic worker group (critic.enable is false)")

    # -------------------------------------------------------------------------------------- checkpoints
    def save(self, path: Path, step: int) -> None:
        self.wg.save_checkpoint(local_path=str(path), hdfs_path=None, global_step=step, max_ckpt_to_keep=None)

    def save_critic(self, path: Path, step: int) -> None:
        """The critic's FSDP checkpoint (value model, optimizer, extra state) into ``path``."""
        self._need_critic()
        _resolved(self.critic_wg.save_checkpoint(str(path), None, step, max_ckpt_to_keep=None))

    def load_critic(self, path: Path) -> None:
        self._need_critic()
        if not (Path(path) / "fsdp_config.json").is_file():
            raise VerlBackendError(f"{path} is not a verl FSDP critic checkpoint (no fsdp_config.json)")
        _resolved(self.critic_wg.load_checkpoint(str(path), None, del_local_after_load=False))

    def load(self, path: Path) -> None:
        if not (Path(path) / "fsdp_config.json").is_file():
            raise VerlBackendError(f"{path} is not a verl FSDP checkpoint (no fsdp_config.json)")
        self.wg.load_checkpoint(local_path=str(path), hdfs_path=None, del_local_after_load=False)

    def close(self) -> None:
        if self.rollout is not None:
            self.rollout.close()


def ref_in_actor(config: Any) -> bool:
    """verl's rule (0.9.1, ``RayPPOTrainer.__init__`` and ``trainer/main_ppo_v0.py``): with a LoRA actor
    (``model.lora.rank`` or ``model.lora_rank`` > 0, or a ``model.lora_adapter_path``) the reference policy is
    the actor without its adapter, so no reference model is built."""
    model = config.actor_rollout_ref.model
    rank = (model.get("lora", None) or {}).get("rank", 0) or model.get("lora_rank", 0) or 0
    return rank > 0 or model.get("lora_adapter_path", None) is not None


def rollout_logprob_diff(data: Any, actor: Any, rollout: Any = None) -> dict[str, list[float]]:
    """|actor - rollout| log-probs over the response tokens (padding rows excluded): max and mean."""
    rollout = data["old_log_probs"] if rollout is None else rollout
    mask = data["response_mask"].bool()
    diff = (actor.float() - rollout.float()).abs()[mask]
    if diff.numel() == 0:
        return {}
    return {"rollout_logprob_diff_max": [float(diff.max())], "rollout_logprob_diff_mean": [float(diff.mean())]}


class VLLMRollout:
    """The GPU rollout of a model group: verl's vLLM server replicas (``LLMServerManager``), the
    :class:`~.policy.ServerPolicy` on them, and verl's ``CheckpointEngineManager`` weight sync (in place for
    colocated replicas, NCCL/NIXL/... for standalone ones)."""

    def __init__(self, group: ModelGroup, pool: Any) -> None:
        from verl.checkpoint_engine import CheckpointEngineManager
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.rollout.llm_server import LLMServerManager

        plan, cfg = group.plan, group.config
        if plan.colocated:
            self.servers = LLMServerManager.create(config=cfg, worker_group=group.wg, rollout_resource_pool=pool)
        else:
            self.servers = LLMServerManager.create(config=cfg, start_rank=plan.rollout_start_rank)
        engine_config = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.checkpoint_engine)
        self.sync = CheckpointEngineManager(
            config=engine_config, actor_wg=group.wg, replicas=self.servers.get_replicas()
        )
        self.policy = ServerPolicy(
            self.servers.get_client(),
            group.tokenizer,
            model_id=plan.path,
            max_model_len=int(cfg.actor_rollout_ref.rollout.max_model_len),
            chat_template_kwargs=group.chat_template_kwargs(),
            timeout_s=group.verl.request_timeout_s,
        )

    def sync_weights(self, step: int) -> dict[str, float]:
        metrics = self.sync.update_weights(global_steps=step) or {}
        return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}

    def sleep(self) -> None:
        self.sync.sleep_replicas()

    def close(self) -> None:
        self.policy.close()


def _resolved(out: Any) -> Any:
    """The value of a worker-group call: verl registers some methods non-blocking (a ``DataProtoFuture``)."""
    from verl.protocol import DataProtoFuture

    return out.get() if isinstance(out, DataProtoFuture) else out


def _number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)
