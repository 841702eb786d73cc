"""Stagewise hierarchical GRPO on GPUs: the training loop over verl doing generation and updates.

One step (:meth:`metaagent.train.loop.TrainLoop.train_step`; only the backend's part differs from the local one)::

    active  = schedule.active_roles(t)                       Eq. 9
    tasks   = sampler.next_batch()
    trees   = engine.rollout(tasks)                          agent + designer calls -> verl's vLLM servers
    credit  = assign_credit(trees, algo.estimator)           any registered estimator (default hierarchical,
                                                             Eq. 4-7), records + credit/* metrics
    samples = build_samples(trees, active_roles=active)      inactive role: not built, not in any batch
    check   = member_advantages(trees) == sample advantages  the same credit through verl's estimator registry
                                                             (hierarchical, flat; other estimators:
                                                             credit/verl_check_skipped = 1)
    GAE (unity mode gae): values = critic_values(samples)   verl's critic worker group of each model (the token
                          advantages = whiten(gae(r, V))    stage's pre-pass), then metaagent's one GAE formula
    per physical model with samples:
        batch = build_update_batch(samples of the model)     verl layout, zero-weight DP padding, balance
        GAE: update_critic(batch)                            verl's clipped value loss towards the returns
        vLLM sleeps (colocated) -> update_actor(batch) -> weights synced to the vLLM replicas

A physical model without samples this step (e.g. the designer model of separate weights during an executor
stage) gets no ``update_actor`` call at all: its optimizer, Adam moments and learning-rate schedule do not
move (true masking, unlike a near-zero learning rate).

The run directory has the local backend's layout (``config.yaml``, ``run.json``, ``metrics.jsonl``,
``rollouts/step_*.jsonl``, ``checkpoints/step_*/``), so replay and the other tools read it unchanged.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from metaagent.policy.models import ALIASES, fix_chat_tokens, resolve_model
from metaagent.records import DESIGNER, RolloutTree
from metaagent.train.backend import Backend, Capabilities, Needs, Policies
from metaagent.train.backend_sections import VerlConfig
from metaagent.train.config import TrainConfig
from metaagent.train.roles import executor_policy
from metaagent.train.schedule import ROLES

from .cpu import HFRollout, activate, cpu_pool
from .errors import VerlBackendError
from .plan import Plan, model_loss, resolve_plan


class VerlBackend(Backend):
    """The verl backend (:class:`metaagent.train.backend.Backend`; module docstring). Needs CUDA GPUs and a Ray
    cluster, or ``verl.device=cpu`` (verl's FSDP engine in CPU workers, the HF policy as the rollout: :mod:`.cpu`).
    The worker groups start in :meth:`start`; without ``groups`` too few CUDA GPUs are refused here
    (:func:`require_gpus`).

    Args:
        config: the resolved run configuration (``trainer.backend: verl``).
        plan: the resolved plan (computed from ``config`` when None).
        groups: physical model key -> an already started :class:`~.workers.ModelGroup` (or an object with its
            interface: ``policy``, ``dp_size``, ``pad_id``, ``update``, ``sync_weights``,
            ``free_rollout_memory``, ``save``, ``load``, ``close``); None starts them (GPUs, or CPU workers).
    """

    name = "verl"
    # token advantages: build_update_batch lays Sample.token_advantages out per token; a critic: a verl critic
    # worker group per model (critic.enable, plan.critic). The plan refuses the rest (resolve_plan); the base
    # class's ref_logprobs and reset_optimizer_moments refuse in one line.
    capabilities = Capabilities(token_advantages=True, critic=True)

    def __init__(
        self, config: TrainConfig, *, plan: Plan | None = None, groups: Mapping[str, Any] | None = None
    ) -> None:
        self.config = config
        self._owns_ray = False
        self.plan = plan or resolve_plan(config)
        self.verl: VerlConfig = self.plan.verl
        self._worker_env: dict[str, str] = {}
        self._given = dict(groups) if groups is not None else None
        self.groups: dict[str, Any] = {}
        if groups is None:  # before verl picks its platform: the plugin must be loaded (cpu: the CPU platform)
            require_gpus(self.plan)  # a clear refusal instead of a Ray scheduling hang
            self._worker_env = activate(self.verl.device, self.verl.hf_rollout)

        from . import advantage  # noqa: F401  registers metaagent's estimators with verl

    def start(self, needs: Needs) -> None:
        """Start a worker group per physical model (the critic's with it: ``plan.critic``, which ``needs``
        agrees with), or take the given ones."""
        self.groups = self._given if self._given is not None else self._start_models()
        expected = sorted(m.key for m in self.plan.models)
        if sorted(self.groups) != expected:
            raise VerlBackendError(
                f"model groups {sorted(self.groups)} do not match the plan's models {expected}"
            )

    def policies(self, step: int) -> Policies:
        """The servers' policies, after the (restored) actor weights of ``step`` are synced to them."""
        for group in self.groups.values():  # vLLM serves the (restored) actor weights from the first step
            group.sync_weights(step)
        return Policies(
            self.groups[self.plan.designer_key].policy,
            executor_policy({k: g.policy for k, g in self.groups.items()}, self.plan.executor_keys),
        )

    # ---- set-up ------------------------------------------------------------------------------------------

    def _start_models(self) -> dict[str, Any]:
        import ray
        from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

        from .verl_config import compose_verl_config
        from .workers import ModelGroup

        groups: dict[str, Any] = {}
        for mp in self.plan.models:
            path = resolve_model(mp.path) if mp.path in ALIASES else mp.path
            mp = dataclasses.replace(mp, path=path)
            verl_cfg = compose_verl_config(self.config, self.plan, mp, run_dir=str(Path(self.config.trainer.out)))
            if self.plan.critic and verl_cfg.critic.model.path in ALIASES:  # critic.model names an alias
                verl_cfg.critic.model.path = resolve_model(verl_cfg.critic.model.path)
            if not ray.is_initialized():
                runtime_env = get_ppo_ray_runtime_env(verl_cfg)
                runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **self._worker_env}
                # a local CPU cluster (CI, pipeline checks) starts without the dashboard: ~5 s and 2 processes less
                local_cpu = self.verl.ray_address is None and self.verl.device == "cpu"
                ray.init(
                    address=self.verl.ray_address, runtime_env=runtime_env,
                    **({"include_dashboard": False} if local_cpu else {}),
                )  # fmt: skip
                self._owns_ray = True
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(path)
            if tokenizer.pad_token_id is None:
                fix_chat_tokens(tokenizer)
            group = ModelGroup(
                mp, verl_cfg, self.verl, tokenizer, seed=self.config.trainer.seed,
                chat_template_kwargs=self.config.policy.chat_template_kwargs,
            )  # fmt: skip
            if self.verl.hf_rollout:  # the HF policy in this process as the rollout (CPU, or CUDA without vLLM)
                max_batch, device = self.config.policy.max_batch_size, self.verl.device
                group.start(
                    pool=cpu_pool(mp.gpus) if device == "cpu" else None,
                    device_name=device,
                    rollout=lambda g, pool: HFRollout(g, g.chat_template_kwargs(), max_batch_size=max_batch, device=device),
                )
            else:
                group.start()
            groups[mp.key] = group
        return groups

    def run_info(self) -> dict[str, Any]:
        models = {DESIGNER: self.plan.model(self.plan.designer_key).path} | {
            p: self.plan.model(k).path for p, k in self.plan.executor_keys.items()
        }
        return {"models": models, "verl": dataclasses.asdict(self.verl)}

    # ---- checkpoints -------------------------------------------------------------------------------------

    def restore(self, path: Path) -> dict[str, Any]:
        from .checkpoint import load_verl_checkpoint

        return load_verl_checkpoint(path, groups=self.groups)

    def save(
        self, run_dir: Path, next_step: int, *, state: dict[str, Any], designer_prompt: str, domain_hint: bool = True
    ) -> Path:
        """verl's checkpoint of every group, and the loop's ``state``; the designer prompt (style and domain
        hint) is not written into it (the local backend's checkpoints carry it)."""
        from .checkpoint import save_verl_checkpoint

        return save_verl_checkpoint(
            run_dir, next_step, groups=self.groups, hf_weights=self.verl.save_hf_model, state=state
        )

    # ---- the backend's part of a step --------------------------------------------------------------------

    def check_samples(self, trees: list[RolloutTree], samples: Any, options: dict[str, Any]) -> dict[str, Any]:
        """The advantages in the samples equal verl's registered estimator on the same records; estimators
        without a verl counterpart are not cross-checked, and the metric says so."""
        from .advantage import check_sample_advantages, member_advantages
        from .plan import VERL_ESTIMATORS

        if self.config.algo.estimator not in VERL_ESTIMATORS or self.config.algo.designer_baseline != "group":
            return {"credit/verl_check_skipped": 1.0}  # (verl's estimators know no control baseline)
        member = member_advantages(trees, self.config.algo.estimator, **options)
        return {
            "credit/verl_check_skipped": 0.0,
            "credit/verl_estimator_max_abs_diff": check_sample_advantages(samples, member),
        }

    def model_key(self, sample: Any) -> str:
        from metaagent.learn.samples import model_key

        return model_key(sample, self.plan.route)

    def values(self, samples: Sequence[Any]) -> list[list[float]]:
        """The critic pre-pass of GAE: ``V_t`` of every response token of ``samples`` from the critic worker
        group of the sample's own model (verl ``infer_batch`` on the value model), in input order."""
        from metaagent.learn.samples import route_samples

        from .batch import build_update_batch

        out: dict[int, list[float]] = {}
        index = {id(s): n for n, s in enumerate(samples)}
        for key, mine in route_samples(samples, self.plan.route).items():
            group = self.groups[key]
            if not getattr(group, "use_critic", False):
                raise VerlBackendError(f"samples routed to model {key}, which has no critic worker group")
            batch = build_update_batch(mine, dp_size=group.dp_size, pad_id=group.pad_id)
            group.free_rollout_memory()  # colocated: the value model's forward needs the rollout's memory
            values = group.critic_values(batch)  # (B, R)
            for row, n in enumerate(batch.order):
                if n >= 0:
                    out[index[id(mine[n])]] = values[row, : len(mine[n].response_ids)].tolist()
        return [out[n] for n in range(len(samples))]

    def _update_critic(self, key: str, group: Any, mine: list, step: int) -> dict[str, Any]:
        """One value-loss step of model ``key``'s critic on its samples with GAE returns; ``train/critic/*``
        (one model) or ``train/critic/<key>/*`` (several), as the local backend names them."""
        from .batch import build_update_batch

        graded = [s for s in mine if s.returns is not None]
        metrics: dict[str, float] = {"samples": float(len(graded)), "lr": float(self.config.critic.lr)}
        if graded:
            batch = build_update_batch(graded, dp_size=group.dp_size, pad_id=group.pad_id)
            group.free_rollout_memory()
            t0 = time.perf_counter()
            metrics.update(group.update_critic(batch, step=step))
            metrics["update_s"] = time.perf_counter() - t0
            metrics["skipped_step"] = 0.0
        else:
            metrics["skipped_step"] = 1.0
        prefix = "train/critic/" if len(self.groups) == 1 else f"train/critic/{key}/"
        # verl's engine figures (memory, mfu) sit beside the actor's, under verl/<key>/critic/
        return {
            (f"verl/{key}/critic/{k}" if k.startswith("perf/") or k == "mfu" else prefix + k): v
            for k, v in metrics.items()
        }

    def update(self, samples: Any, step: int, active: frozenset[str], pairs: Sequence[Any]) -> dict[str, Any]:
        if pairs:
            raise VerlBackendError(
                "the DPO loss on preference pairs (optim.dpo) runs on the local backend only for now; "
                "set optim.dpo=false or trainer.backend=local"
            )
        from metaagent.learn.samples import route_samples

        from .batch import build_update_batch

        metrics: dict[str, Any] = {}
        for role in ROLES:
            metrics[f"train/samples/{role}"] = float(sum(s.role == role for s in samples))
            metrics[f"train/tokens/{role}"] = float(
                sum(len(s.response_ids) for s in samples if s.role == role)
            )
        routed = route_samples(samples, self.plan.route)
        single = len(self.groups) == 1
        for key, group in self.groups.items():
            mine = routed.get(key, [])
            metrics[f"verl/{key}/samples"] = float(len(mine))
            if getattr(group, "use_critic", False):
                metrics.update(self._update_critic(key, group, mine, step))
                if step < self.config.critic.warmup_steps:  # verl's critic_warmup: no actor update yet
                    metrics["train/critic_warmup"] = 1.0
                    if mine:
                        metrics.update(group.sync_weights(step + 1))  # wakes the rollout the critic put to sleep
                    continue
            if not any(_learns(s) for s in mine):
                # nothing to learn for this model (no sample, or every advantage 0): no update_actor call, so
                # neither momentum nor weight decay moves the weights; the optimizer is untouched
                metrics[f"verl/{key}/skipped_step"] = 1.0
                metrics[f"verl/{key}/zero_advantage_step"] = float(bool(mine))
                if getattr(group, "use_critic", False) and mine:
                    metrics.update(group.sync_weights(step + 1))  # wakes the rollout the critic put to sleep
                continue
            batch = build_update_batch(
                mine,
                dp_size=group.dp_size,
                pad_id=group.pad_id,
                advantage_placement=self.verl.advantage_placement,
                loss_agg_mode=model_loss(self.config, self.plan.model(key).roles).loss_agg_mode,
            )
            metrics.update({f"verl/{key}/{k.removeprefix('verl/')}": v for k, v in batch.metrics.items()})
            group.free_rollout_memory()
            t0 = time.perf_counter()
            update = group.update(batch, step=step)
            t1 = time.perf_counter()
            metrics.update(update)
            metrics.update(self._tis_metrics(key, update, single))
            metrics.update(group.sync_weights(step + 1))
            metrics[f"verl/{key}/skipped_step"] = 0.0
            metrics[f"time/update/{key}_s"] = t1 - t0
            metrics[f"time/sync/{key}_s"] = time.perf_counter() - t1
            loss = update.get(f"verl/{key}/actor/loss")
            if loss is not None:
                metrics["train/loss" if single else f"train/{key}/loss"] = loss
        return metrics

    def _tis_metrics(self, key: str, update: dict[str, Any], single: bool) -> dict[str, float]:
        """``optim.tis_cap``: the local backend's ``train/tis_*`` / ``train/mismatch_*`` metrics (``train/<key>/...``
        with several models) from verl's ``rollout_corr/*`` of this model's update."""
        from metaagent.learn.losses import tis_metrics

        prefix = f"verl/{key}/rollout_corr/"
        if self.config.optim.tis_cap is None or f"{prefix}rollout_is_mean" not in update:
            return {}
        m = tis_metrics(update, self.config.optim.tis_level, prefix=prefix)
        return m if single else {f"train/{key}/{k.removeprefix('train/')}": v for k, v in m.items()}

    def close(self) -> None:
        for group in self.groups.values():
            group.close()
        if getattr(self, "_owns_ray", False):
            import ray

            ray.shutdown()  # ends the worker groups and vLLM servers this trainer started
            self._owns_ray = False


def _learns(sample: Any) -> bool:
    """Whether a sample moves the actor: a non-zero advantage on some token."""
    if sample.token_advantages is not None:
        return any(a != 0 for a in sample.token_advantages)
    return sample.advantage != 0


def require_gpus(plan: Plan) -> None:
    """Refuse to start without enough CUDA GPUs (a clear message instead of a Ray scheduling hang); nothing to
    check for ``verl.device=cpu``."""
    import torch

    if plan.verl.device == "cpu":
        return
    if not torch.cuda.is_available():
        raise VerlBackendError(
            "the verl backend trains on CUDA GPUs and none is visible here; run it on a GPU node, use "
            "--dry-run to check the plan, verl.device=cpu (small models, CI), or trainer.backend=local for CPU / "
            "one-GPU runs"
        )
    if plan.verl.nnodes == 1 and torch.cuda.device_count() < plan.used_gpus and not plan.verl.ray_address:
        raise VerlBackendError(
            f"the plan uses {plan.used_gpus} GPUs but this node has {torch.cuda.device_count()}; lower verl.models "
            "GPU counts / verl.n_gpus_per_node, or pass verl.ray_address of a larger cluster"
        )
