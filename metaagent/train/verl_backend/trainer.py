"""Stagewise hierarchical GRPO on GPUs: the local trainer's loop with verl doing generation and updates.

One step (compare :mod:`metaagent.train.trainer`; only the last two lines differ)::

    active  = schedule.active_roles(t)                       Eq. 9
    tasks   = sampler.next_batch()
    trees   = engine.rollout(tasks)                          agent + designer calls -> verl's vLLM servers
    credit  = assign_credit(trees, "hierarchical")           Eq. 4-7, records + credit/* metrics
    samples = build_samples(trees, active_roles=active)      inactive role: not built, not in any batch
    check   = member_advantages(trees) == sample advantages  the same credit through verl's estimator registry
    per physical model with samples:
        batch = build_update_batch(samples of the model)     verl layout, zero-weight DP padding, balance
        vLLM sleeps (colocated) -> update_actor(batch) -> weights synced to the vLLM replicas

A physical model without samples this step (e.g. the designer model of separate weights during an executor
stage) gets no ``update_actor`` call at all: its optimizer, Adam moments and learning-rate schedule do not
move (true masking, unlike a near-zero learning rate).

The run directory has the local backend's layout (``config.yaml``, ``run.json``, ``metrics.jsonl``,
``rollouts/step_*.jsonl``, ``checkpoints/step_*/``), so replay and the other tools read it unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from metaagent import __version__
from metaagent.rollout.engine import RolloutEngine, RolloutObserver, derive_seed
from metaagent.rollout.metrics import rollout_metrics
from metaagent.rollout.records import TreeWriter
from metaagent.train.config import TrainConfig
from metaagent.train.metrics import MetricsLogger
from metaagent.train.trainer import StepResult, TrainError, _config_hash, active_name, load_tasks

from .config import VerlConfig
from .errors import VerlBackendError
from .plan import Plan, resolve_plan


class VerlTrainer:
    """The verl backend's training loop (module docstring). Needs CUDA GPUs and a Ray cluster.

    Args:
        config: the resolved run configuration (``trainer.backend: verl``).
        plan: the resolved plan (computed from ``config`` when None).
        resume: a checkpoint folder, or True for the newest checkpoint of ``trainer.out``.
        observer: rollout progress hooks (the CLI's display).
        groups: physical model key -> an already started :class:`~.workers.ModelGroup` (or an object with its
            interface: ``policy``, ``dp_size``, ``pad_id``, ``update``, ``sync_weights``,
            ``free_rollout_memory``, ``save``, ``load``, ``close``); None starts them on the GPUs.
    """

    def __init__(
        self,
        config: TrainConfig,
        *,
        plan: Plan | None = None,
        resume: str | bool | None = None,
        observer: RolloutObserver | None = None,
        groups: Mapping[str, Any] | None = None,
    ) -> None:
        from metaagent.data import MixtureSampler
        from metaagent.train.schedule import StageSchedule

        from . import advantage  # noqa: F401  registers metaagent's estimators with verl

        self.config = cfg = config
        self._owns_ray = False
        self.plan = plan or resolve_plan(cfg)
        self.verl: VerlConfig = self.plan.verl
        self.run_dir = Path(cfg.trainer.out)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.schedule = StageSchedule(cfg.schedule.mode, cfg.schedule.stage_len)

        self.train_tasks = load_tasks(cfg.data.train)
        if not self.train_tasks:
            raise TrainError("data.train yielded no tasks; check the dataset specs in the config")
        self.val_tasks = load_tasks(cfg.data.val)[: cfg.trainer.val_tasks] if cfg.trainer.val_every else []
        ratio = {"math": cfg.data.math_fraction, "code": 1.0 - cfg.data.math_fraction}
        present = {t.domain for t in self.train_tasks}
        ratio = {d: r for d, r in ratio.items() if r > 0 and d in present} or {d: 1.0 for d in present}
        self.sampler = MixtureSampler(
            self.train_tasks, batch_size=cfg.data.batch_size, ratio=ratio, seed=cfg.trainer.seed
        )

        checkpoint = self._find_checkpoint(resume)  # before the GPUs start: a bad --resume fails fast
        self.groups = dict(groups) if groups is not None else self._start_models()
        expected = sorted(m.key for m in self.plan.models)
        if sorted(self.groups) != expected:
            raise VerlBackendError(
                f"model groups {sorted(self.groups)} do not match the plan's models {expected}"
            )
        self.start_step = 0
        run_info = self._run_info()
        if checkpoint is not None:
            self.start_step = self._restore(checkpoint)
            run_info = json.loads((self.run_dir / "run.json").read_text())
        else:
            (self.run_dir / "run.json").write_text(json.dumps(run_info, indent=2))
            (self.run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        self.run_id = run_info["run_id"]
        for group in self.groups.values():  # vLLM serves the (restored) actor weights from the first step
            group.sync_weights(self.start_step)

        self.engine = RolloutEngine(
            designer=self.groups[self.plan.designer_key].policy,
            executor=self._executor_policy(),
            config=cfg.rollout,
            reward_config=cfg.reward_config(),
            run_id=self.run_id,
            record_config=cfg.to_dict(),
            observer=observer or RolloutObserver(),
        )
        self.logger = MetricsLogger(
            self.run_dir,
            tensorboard=cfg.trainer.tensorboard,
            resume_step=self.start_step - 1 if checkpoint else None,
        )

    # ---- set-up ------------------------------------------------------------------------------------------

    def _start_models(self) -> dict[str, Any]:
        import ray
        from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

        from metaagent.policy.models import ALIASES, fix_chat_tokens, resolve_model

        from .verl_config import compose_verl_config
        from .workers import ModelGroup

        groups: dict[str, Any] = {}
        for mp in self.plan.models:
            path = resolve_model(mp.path) if mp.path in ALIASES else mp.path
            mp = dataclasses.replace(mp, path=path)
            verl_cfg = compose_verl_config(self.config, self.plan, mp, run_dir=str(self.run_dir))
            if not ray.is_initialized():
                ray.init(address=self.verl.ray_address, runtime_env=get_ppo_ray_runtime_env(verl_cfg))
                self._owns_ray = True
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(path)
            if tokenizer.pad_token_id is None:
                fix_chat_tokens(tokenizer)
            group = ModelGroup(mp, verl_cfg, self.verl, tokenizer, seed=self.config.trainer.seed)
            group.start()
            groups[mp.key] = group
        return groups

    def _executor_policy(self):
        keys = set(self.plan.executor_keys.values())
        if len(keys) == 1:
            return self.groups[keys.pop()].policy
        from metaagent.policy.registry import PolicyRegistry, RoutingPolicy

        return RoutingPolicy(
            PolicyRegistry({p: self.groups[k].policy for p, k in self.plan.executor_keys.items()})
        )

    def _run_info(self) -> dict[str, Any]:
        return {
            "run_id": f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
            "seed": self.config.trainer.seed,
            "models": {"designer": self.plan.model(self.plan.designer_key).path}
            | {p: self.plan.model(k).path for p, k in self.plan.executor_keys.items()},
            "metaagent_version": __version__,
            "created_at": time.time(),
            "backend": "verl",
            "verl": dataclasses.asdict(self.verl),
        }

    def _find_checkpoint(self, resume: str | bool | None) -> Path | None:
        from metaagent.train.checkpoint import latest_checkpoint

        if not resume:
            return None
        if resume is True:
            path = latest_checkpoint(self.run_dir)
            if path is None:
                raise TrainError(
                    f"--resume: no checkpoint under {self.run_dir}/checkpoints; start without --resume"
                )
            return path
        path = Path(resume)
        if not (path / "meta.json").is_file():
            raise TrainError(f"--resume {path}: not a checkpoint folder (no meta.json)")
        return path

    def _restore(self, path: Path) -> int:
        from .checkpoint import load_verl_checkpoint

        state = load_verl_checkpoint(path, groups=self.groups)
        self.sampler.load_state_dict(state["sampler"])
        if state.get("config_hash") != _config_hash(self.config):
            print(f"warning: resuming {path} with a different config than it was saved with", file=sys.stderr)
        return int(state["next_step"])

    def save(self, next_step: int) -> Path:
        from .checkpoint import save_verl_checkpoint

        return save_verl_checkpoint(
            self.run_dir,
            next_step,
            groups=self.groups,
            hf_weights=self.verl.save_hf_model,
            state={
                "next_step": next_step,
                "sampler": self.sampler.state_dict(),
                "schedule": self.schedule.state_dict(),
                "config_hash": _config_hash(self.config),
                "run_id": self.run_id,
            },
        )

    # ---- the loop ----------------------------------------------------------------------------------------

    def _credit_options(self) -> dict[str, Any]:
        a = self.config.algo
        options: dict[str, Any] = {
            "eps": a.eps,
            "norm_by_std": a.norm_by_std,
            "filter_zero_var": a.filter_zero_var,
        }
        if a.estimator == "hierarchical":
            options["executor_group"] = a.executor_group
        return options

    def _update(self, samples, step: int) -> dict[str, Any]:
        from metaagent.train.samples import route_samples
        from metaagent.train.schedule import ROLES

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
            if not mine:  # nothing to learn for this model: no update_actor call, optimizer untouched
                metrics[f"verl/{key}/skipped_step"] = 1.0
                continue
            batch = build_update_batch(
                mine,
                dp_size=group.dp_size,
                pad_id=group.pad_id,
                advantage_placement=self.verl.advantage_placement,
            )
            metrics.update({f"verl/{key}/{k.removeprefix('verl/')}": v for k, v in batch.metrics.items()})
            group.free_rollout_memory()
            t0 = time.perf_counter()
            update = group.update(batch, step=step)
            t1 = time.perf_counter()
            metrics.update(update)
            metrics.update(group.sync_weights(step + 1))
            metrics[f"verl/{key}/skipped_step"] = 0.0
            metrics[f"time/update/{key}_s"] = t1 - t0
            metrics[f"time/sync/{key}_s"] = time.perf_counter() - t1
            loss = update.get(f"verl/{key}/actor/loss")
            if loss is not None:
                metrics["train/loss" if single else f"train/{key}/loss"] = loss
        return metrics

    def train_step(self, step: int) -> StepResult:
        from metaagent.credit import assign_credit
        from metaagent.train.models import temperatures
        from metaagent.train.samples import build_samples

        from .advantage import check_sample_advantages, member_advantages

        cfg = self.config
        t_start = time.perf_counter()
        active = self.schedule.active_roles(step)
        stage = self.schedule.stage(step)
        tasks = self.sampler.next_batch()
        trees = self.engine.rollout(tasks, step=step, seed=derive_seed(cfg.trainer.seed, step, "rollout"))
        t_rollout = time.perf_counter() - t_start

        options = self._credit_options()
        credit = assign_credit(trees, cfg.algo.estimator, **options)
        with TreeWriter(self._rollout_path(step), truncate=True) as w:
            for tree in trees:
                w.write(tree)
        samples = build_samples(
            trees,
            active_roles=active,
            temperatures=temperatures(cfg.rollout),
            turn_advantages=credit.turn_advantages,
            max_prompt_len=cfg.optim.max_prompt_tokens,
            max_response_len=cfg.optim.max_response_tokens,
        )
        worst = check_sample_advantages(samples, member_advantages(trees, cfg.algo.estimator, **options))
        t_update = time.perf_counter()
        update_metrics = self._update(samples, step)
        t_end = time.perf_counter()

        metrics: dict[str, Any] = {
            "schedule/active": active_name(active),
            "schedule/stage": stage.index,
            **rollout_metrics(trees),
            **credit.metrics,
            "credit/verl_estimator_max_abs_diff": worst,
            **samples.metrics,
            **update_metrics,
            "time/rollout_s": t_rollout,
            "time/update_s": t_end - t_update,
            "time/step_s": t_end - t_start,
        }
        self.logger.log(step, metrics)
        return StepResult(step, metrics, trees)

    def validate(self, step: int) -> dict[str, Any]:
        """One design per task (greedy by default), ``val_repeats`` repeats; metrics under ``val/``."""
        cfg = self.config
        greedy = cfg.trainer.val_greedy
        trees = self.engine.rollout(
            self.val_tasks,
            step=step,
            seed=derive_seed(cfg.trainer.seed, "val"),
            mode="eval",
            m_designs=cfg.trainer.val_repeats,
            n_executions=1,
            designer_sampling=cfg.rollout.designer.params().replace(temperature=0.0) if greedy else None,
            executor_sampling=cfg.rollout.executor.params().replace(temperature=0.0) if greedy else None,
        )
        with TreeWriter(self._rollout_path(step, prefix="val_"), truncate=True) as w:
            for tree in trees:
                w.write(tree)
        metrics = {"val/" + k.split("/", 1)[1]: v for k, v in rollout_metrics(trees).items()}
        self.logger.log(step, metrics)
        return metrics

    def train(self, on_step: Callable[[StepResult], None] | None = None) -> list[StepResult]:
        """Run from ``start_step`` to ``trainer.steps``; checkpoint every ``save_every`` steps and at the end."""
        cfg = self.config.trainer
        results, last_saved = [], None
        try:
            for step in range(self.start_step, cfg.steps):
                result = self.train_step(step)
                if cfg.val_every and (step + 1) % cfg.val_every == 0 and self.val_tasks:
                    result.metrics.update(self.validate(step))
                results.append(result)
                if on_step is not None:
                    on_step(result)
                if cfg.save_every and (step + 1) % cfg.save_every == 0:
                    self.save(step + 1)
                    last_saved = step + 1
            if cfg.steps > self.start_step and last_saved != cfg.steps:
                self.save(cfg.steps)
        finally:
            self.logger.close()
        return results

    def close(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()
        for group in getattr(self, "groups", {}).values():
            group.close()
        if getattr(self, "_owns_ray", False):
            import ray

            ray.shutdown()  # ends the worker groups and vLLM servers this trainer started
            self._owns_ray = False

    def __enter__(self) -> VerlTrainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rollout_path(self, step: int, prefix: str = "") -> Path:
        return self.run_dir / "rollouts" / f"{prefix}step_{step:06d}.jsonl"


def require_gpus(plan: Plan) -> None:
    """Refuse to start without enough CUDA GPUs (a clear message instead of a Ray scheduling hang)."""
    import torch

    if not torch.cuda.is_available():
        raise VerlBackendError(
            "the verl backend trains on CUDA GPUs and none is visible here; run it on a GPU node, use "
            "--dry-run to check the plan, or trainer.backend=local for CPU / one-GPU runs"
        )
    if plan.verl.nnodes == 1 and torch.cuda.device_count() < plan.used_gpus and not plan.verl.ray_address:
        raise VerlBackendError(
            f"the plan uses {plan.used_gpus} GPUs but this node has {torch.cuda.device_count()}; lower verl.models "
            "GPU counts / verl.n_gpus_per_node, or pass verl.ray_address of a larger cluster"
        )
