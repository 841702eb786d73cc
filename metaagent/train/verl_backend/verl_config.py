"""verl's own ``ppo_trainer`` config for one physical model, filled in from the metaagent config.

The worker groups, vLLM servers and weight sync read verl's config objects, so the backend composes verl's
shipped ``verl/trainer/config/ppo_trainer.yaml`` with Hydra (the same file ``python -m verl.trainer.main_ppo``
uses) and sets the fields metaagent decides. Composition only reads YAML: it imports neither torch nor
verl, so ``--dry-run`` can show and check the result anywhere.

Precedence: verl defaults < metaagent's settings (:func:`metaagent_settings`) < ``verl.overrides``.
"""

from __future__ import annotations

import importlib.util
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from metaagent.config import ConfigError
from metaagent.policy.models import ALIASES, resolve_model
from metaagent.seeding import lora_seed
from metaagent.train.config import TrainConfig

from .device import critic_device_settings, device_settings
from .plan import ModelPlan, Plan, model_loss

VERL_CONFIG_NAME = "ppo_trainer"

#: settings shown by ``--dry-run`` for each model (dotted verl keys)
SHOWN_KEYS = (
    "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
    "actor_rollout_ref.actor.fsdp_config.param_offload",
    "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "actor_rollout_ref.rollout.gpu_memory_utilization",
    "actor_rollout_ref.rollout.max_model_len",
    "actor_rollout_ref.rollout.checkpoint_engine.backend",
    "actor_rollout_ref.model.override_config.attn_implementation",
    "trainer.device",
    "algorithm.rollout_correction.rollout_is",
    "algorithm.rollout_correction.rollout_is_threshold",
)


AR = "actor_rollout_ref"  # the prefix of verl's actor, rollout and reference keys

SUPPORTED_VERL = ((0, 9), (0, 10))  # [lowest, first unsupported): the range pinned in pyproject.toml


def verl_config_dir() -> Path:
    """Folder of verl's shipped Hydra configs, found without importing verl; checks the verl version."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the verl backend needs verl: pip install 'verl>=0.9,<0.10'")
    try:
        found = version("verl")
    except PackageNotFoundError:
        found = "0"
    parts = tuple(int(x) for x in found.split(".")[:2] if x.isdigit())
    if not SUPPORTED_VERL[0] <= parts < SUPPORTED_VERL[1]:
        raise ConfigError(
            f"verl {found} is installed; the verl backend drives verl 0.9.x internals (worker groups, LLM servers, "
            "checkpoint engine): pip install 'verl>=0.9,<0.10'"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"
    if not (path / f"{VERL_CONFIG_NAME}.yaml").is_file():
        raise ConfigError(
            f"{path} has no {VERL_CONFIG_NAME}.yaml; this verl is not 0.9.x (pip install 'verl>=0.9,<0.10')"
        )
    return path


def metaagent_settings(
    cfg: TrainConfig, plan: Plan, model: ModelPlan, run_dir: str | None = None
) -> dict[str, Any]:
    """Dotted verl keys -> values for one physical model (module docstring)."""
    v, o = plan.verl, cfg.optim
    settings: dict[str, Any] = {
        **_trainer_settings(cfg, plan, model, run_dir),
        **_actor_settings(cfg, plan, model),
        **_rollout_settings(cfg, plan, model),
        # the workers never compute advantages (metaagent does, on the records); any name verl knows will do
        "algorithm.adv_estimator": plan.verl_estimator or "grpo",
        "algorithm.norm_adv_by_std_in_grpo": cfg.algo.norm_by_std,
        "algorithm.use_kl_in_reward": False,
    }
    settings.update(_lora_settings(cfg, model))
    if o.tis_cap is not None:  # rollout-training mismatch correction: verl's decoupled-mode truncated IS
        # (pi_old recomputed by the actor, the plan forces verl.old_log_prob=recompute; ModelGroup.update adds
        # verl's rollout_is_weights to the batch, which verl's policy loss multiplies in)
        settings["algorithm.rollout_correction.rollout_is"] = o.tis_level
        settings["algorithm.rollout_correction.rollout_is_threshold"] = o.tis_cap
        settings["algorithm.rollout_correction.bypass_mode"] = False
    settings.update(device_settings(v.device, v.attn_implementation, colocated=model.colocated, hf_rollout=v.hf_rollout))
    settings["critic.enable"] = plan.critic
    if plan.critic:
        settings.update(critic_settings(cfg, plan, model))
    return settings


def _trainer_settings(cfg: TrainConfig, plan: Plan, model: ModelPlan, run_dir: str | None) -> dict[str, Any]:
    """verl's ``trainer`` and ``data`` keys: the actor's nodes, the run's names and lengths."""
    v = plan.verl
    actor_nodes = max(1, model.gpus // v.n_gpus_per_node)
    actor_gpus_per_node = min(model.gpus, v.n_gpus_per_node)
    return {
        "trainer.nnodes": actor_nodes,
        "trainer.n_gpus_per_node": actor_gpus_per_node,
        "trainer.project_name": "metaagent",
        "trainer.experiment_name": model.key,
        "trainer.logger": ["console"],
        "trainer.total_training_steps": max(1, plan.steps),
        "trainer.default_local_dir": str(Path(run_dir or cfg.trainer.out) / "checkpoints"),
        "trainer.balance_batch": False,  # metaagent balances the batch itself (batch.build_update_batch)
        "data.max_prompt_length": plan.max_prompt_tokens,
        "data.max_response_length": plan.rollout_response_length,
        "data.train_batch_size": plan.batch_size,
    }


def _actor_settings(cfg: TrainConfig, plan: Plan, model: ModelPlan) -> dict[str, Any]:
    """``actor_rollout_ref``'s model, actor (optimizer, PPO loss, micro-batches, FSDP) and ref keys."""
    v, o, ar = plan.verl, cfg.optim, AR
    loss = model_loss(cfg, model.roles)  # optim.per_role of the roles this model trains (they agree)
    return {
        f"{ar}.hybrid_engine": model.colocated,
        f"{ar}.model.path": model.path,
        f"{ar}.model.use_remove_padding": True,
        f"{ar}.model.enable_gradient_checkpointing": v.gradient_checkpointing,
        f"{ar}.actor.strategy": "fsdp",
        f"{ar}.actor.optim.lr": o.lr,
        f"{ar}.actor.optim.betas": list(o.betas),
        f"{ar}.actor.optim.weight_decay": o.weight_decay,
        f"{ar}.actor.optim.clip_grad": o.grad_clip,
        # the one optimizer config (metaagent.learn.optim): verl's warmup starts at 0, ours at lr / warmup_steps
        f"{ar}.actor.optim.lr_scheduler_type": o.schedule,
        f"{ar}.actor.optim.lr_warmup_steps": o.warmup_steps,
        f"{ar}.actor.optim.lr_warmup_steps_ratio": 0.0,
        f"{ar}.actor.optim.min_lr_ratio": o.min_lr_ratio,
        f"{ar}.actor.optim.override_optimizer_config": {"eps": o.adam_eps},
        f"{ar}.actor.optim.total_training_steps": max(1, plan.steps),
        f"{ar}.actor.grad_clip": o.grad_clip,
        f"{ar}.actor.clip_ratio": o.clip_low,
        f"{ar}.actor.clip_ratio_low": o.clip_low,
        f"{ar}.actor.clip_ratio_high": o.clip_high,
        f"{ar}.actor.loss_agg_mode": loss.loss_agg_mode,
        f"{ar}.actor.policy_loss.loss_mode": o.policy_loss,
        # verl always applies dual clip; an unbounded clip_ratio_c switches it off (optim.dual_clip=false)
        f"{ar}.actor.clip_ratio_c": o.clip_ratio_c if o.dual_clip else 1e30,
        # seq-mean-token-sum-norm divides by a constant; the longest allowed response keeps it fixed
        f"{ar}.actor.loss_scale_factor": o.max_response_tokens
        if loss.loss_agg_mode == "seq-mean-token-sum-norm"
        else None,
        f"{ar}.actor.entropy_coeff": loss.entropy_coef,
        # verl's loss adds the entropy bonus only where it computes the entropies
        f"{ar}.actor.calculate_entropy": v.calculate_entropy or loss.entropy_coef > 0,
        f"{ar}.actor.use_kl_loss": o.kl_coef > 0,
        f"{ar}.actor.kl_loss_coef": o.kl_coef,
        f"{ar}.actor.kl_loss_type": "low_var_kl",
        f"{ar}.actor.use_dynamic_bsz": True,
        f"{ar}.actor.ppo_max_token_len_per_gpu": plan.train_tokens_per_gpu,
        f"{ar}.actor.ppo_mini_batch_size": plan.batch_size,  # unused: every update is one mini-batch
        f"{ar}.actor.ppo_epochs": 1,
        f"{ar}.actor.shuffle": False,
        f"{ar}.actor.ulysses_sequence_parallel_size": v.ulysses_sp,
        f"{ar}.actor.fsdp_config.param_offload": v.param_offload,
        f"{ar}.actor.fsdp_config.optimizer_offload": v.optimizer_offload,
        f"{ar}.actor.checkpoint.save_contents": ["model", "optimizer", "extra"]
        + (["hf_model"] if v.save_hf_model else []),
        f"{ar}.ref.log_prob_max_token_len_per_gpu": plan.logprob_tokens_per_gpu,
    }


def _rollout_settings(cfg: TrainConfig, plan: Plan, model: ModelPlan) -> dict[str, Any]:
    """``actor_rollout_ref.rollout``: the vLLM servers' placement, memory, lengths and log-prob contract."""
    v, ar = plan.verl, AR
    rollout_nodes = max(1, model.rollout_gpus // v.n_gpus_per_node) if not model.colocated else 0
    rollout_gpus_per_node = (
        min(model.gpus, v.n_gpus_per_node) if model.colocated else min(model.rollout_gpus, v.n_gpus_per_node)
    )
    return {
        f"{ar}.rollout.name": v.rollout_name,
        f"{ar}.rollout.mode": "async",
        f"{ar}.rollout.nnodes": rollout_nodes,
        f"{ar}.rollout.n_gpus_per_node": rollout_gpus_per_node,
        f"{ar}.rollout.tensor_model_parallel_size": v.rollout_tp,
        f"{ar}.rollout.gpu_memory_utilization": v.gpu_memory_utilization,
        f"{ar}.rollout.max_num_seqs": v.max_num_seqs,
        f"{ar}.rollout.max_num_batched_tokens": v.max_num_batched_tokens,
        f"{ar}.rollout.enforce_eager": v.enforce_eager,
        f"{ar}.rollout.enable_prefix_caching": v.enable_prefix_caching,
        f"{ar}.rollout.free_cache_engine": model.colocated,
        f"{ar}.rollout.max_model_len": plan.max_model_len,
        f"{ar}.rollout.logprobs_mode": "processed_logprobs",  # log_softmax(logits / T): the Policy contract
        f"{ar}.rollout.calculate_log_probs": True,
        f"{ar}.rollout.temperature": cfg.rollout.executor.temperature or 1.0,
        f"{ar}.rollout.log_prob_max_token_len_per_gpu": plan.logprob_tokens_per_gpu,
        f"{ar}.rollout.checkpoint_engine.backend": "naive" if model.colocated else v.checkpoint_engine,
    }


def _lora_settings(cfg: TrainConfig, model: ModelPlan) -> dict[str, Any]:
    """One adapter on the actor's base (per-role adapters are refused by TrainConfig); empty without LoRA.

    The engine's ``seed`` is the adapter's: verl draws its initial weights under it (:mod:`.verl_plugin`,
    ``install_seeded_lora``), derived from ``trainer.seed`` and the model's key as the local backend's adapters
    are (:class:`metaagent.train.local.lora.AdapterSet`), so one seed gives one starting adapter."""
    lora = cfg.policy.lora
    if not lora.enabled:
        return {}
    return {
        f"{AR}.model.lora_rank": lora.rank,
        f"{AR}.model.lora_alpha": int(lora.alpha) if float(lora.alpha).is_integer() else lora.alpha,
        f"{AR}.model.target_modules": lora.target_modules,
        f"{AR}.actor.fsdp_config.seed": lora_seed(cfg.trainer.seed, model.key),
    }


def critic_settings(cfg: TrainConfig, plan: Plan, model: ModelPlan) -> dict[str, Any]:
    """verl's ``critic`` section of one physical model from metaagent's ``critic`` section (UnityMAS-O GAE).

    As the authors' ``star_ppo/ray_trainer.py::_clone_critic_cfg_for_model``: the critic's model (and tokenizer)
    is the actor's model unless ``critic.model`` names another; verl builds it as its value model (the backbone
    plus a fresh one-output head). The optimizer follows the local critic (:func:`metaagent.train.local.models.make_critics`):
    ``critic.lr`` / ``weight_decay`` / ``grad_clip`` with the policy's betas and epsilon, a constant schedule;
    one mini-batch and one epoch per step, the clipped value loss with ``critic.cliprange_value`` and
    ``critic.loss_agg_mode``. GAE itself runs in metaagent (:func:`metaagent.credit.unity.gae_advantages`), so
    ``algorithm.gamma`` / ``lam`` only document the run."""
    v, o, c = plan.verl, cfg.optim, cfg.critic
    path = model.path if c.model is None else (resolve_model(c.model) if c.model in ALIASES else c.model)
    options = dict(cfg.algo.options)
    settings: dict[str, Any] = {
        "algorithm.adv_estimator": "gae",
        "algorithm.gamma": float(options.get("gamma", 1.0)),
        "algorithm.lam": float(options.get("lam", 1.0)),
        "trainer.critic_warmup": c.warmup_steps,
        "critic.strategy": "fsdp",
        "critic.model.path": path,
        "critic.model.tokenizer_path": model.path,
        "critic.model.use_remove_padding": True,
        "critic.model.enable_gradient_checkpointing": v.gradient_checkpointing,
        "critic.optim.lr": c.lr,
        "critic.optim.weight_decay": c.weight_decay,
        "critic.optim.clip_grad": c.grad_clip,
        "critic.optim.betas": list(o.betas),
        "critic.optim.override_optimizer_config": {"eps": o.adam_eps},
        "critic.optim.lr_scheduler_type": "constant",
        "critic.optim.lr_warmup_steps": 0,
        "critic.optim.lr_warmup_steps_ratio": 0.0,
        "critic.optim.total_training_steps": max(1, plan.steps),
        "critic.grad_clip": c.grad_clip,
        "critic.cliprange_value": c.cliprange_value,
        "critic.loss_agg_mode": c.loss_agg_mode,
        "critic.loss_scale_factor": None,
        "critic.ppo_epochs": 1,
        "critic.shuffle": False,
        "critic.ppo_mini_batch_size": plan.batch_size,  # unused: every update is one mini-batch
        "critic.use_dynamic_bsz": True,
        "critic.ppo_max_token_len_per_gpu": plan.train_tokens_per_gpu,
        "critic.forward_max_token_len_per_gpu": plan.logprob_tokens_per_gpu,
        "critic.fsdp.param_offload": v.param_offload,
        "critic.fsdp.optimizer_offload": v.optimizer_offload,
        "critic.checkpoint.save_contents": ["model", "optimizer", "extra"],
    }
    settings.update(critic_device_settings(v.device, v.attn_implementation))
    return settings


def _override_key(text: str) -> str:
    return text.split("=", 1)[0].strip().lstrip("+~")


def compose_verl_config(cfg: TrainConfig, plan: Plan, model: ModelPlan, run_dir: str | None = None) -> Any:
    """verl's resolved ``ppo_trainer`` config (an OmegaConf ``DictConfig``) for ``model``."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    user = list(plan.verl.overrides)
    try:
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            config = compose(config_name=VERL_CONFIG_NAME, overrides=user)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(
            f"verl.overrides {user} do not apply to verl's {VERL_CONFIG_NAME} config: {e}"
        ) from None
    overridden = {_override_key(o) for o in user}
    OmegaConf.set_struct(config, True)  # a key verl does not have is an error, not a silent new field
    for key, value in metaagent_settings(cfg, plan, model, run_dir).items():
        if _override_key(key) in overridden:
            continue
        try:
            if key.startswith("+"):  # a key verl reads but does not declare (e.g. model.override_config.*)
                with open_dict(config):
                    OmegaConf.update(config, key[1:], value, merge=False)
            else:
                OmegaConf.update(config, key, value, merge=False)
        except OmegaConfBaseException as e:
            raise ConfigError(
                f"verl's {VERL_CONFIG_NAME} config rejects {key}={value!r} ({e}); is this verl 0.9.x?"
            ) from None
    try:
        OmegaConf.resolve(config)
    except OmegaConfBaseException as e:
        raise ConfigError(f"verl config for model {model.key} does not resolve: {e}") from None
    return config


def shown_settings(config: Any) -> dict[str, Any]:
    """The :data:`SHOWN_KEYS` of a composed config, for the dry-run."""
    from omegaconf import OmegaConf

    return {k.removeprefix("actor_rollout_ref."): OmegaConf.select(config, k) for k in SHOWN_KEYS}
