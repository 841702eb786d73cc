"""Stagewise hierarchical GRPO (paper §3): the local training loop.

One step::

    active = schedule.active_roles(t)                      Eq. 9: executor stage first, K steps each
    tasks  = sampler.next_batch()                           half math, half code
    trees  = engine.rollout(tasks, step=t)                  M designs x N executions per task (records)
    credit = assign_credit(trees, "hierarchical")           Eq. 4-7, advantages written into the trees
    samples = build_samples(trees, active_roles=active)     inactive role: not even built
    update_routed(updaters, samples, ...)                   Eq. 2-3 PPO-clip, one optimizer step per model

Everything a step produces is written to the run directory::

    RUN/config.yaml  run.json  metrics.jsonl  rollouts/step_000000.jsonl  checkpoints/step_00000030/
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from metaagent import __version__
from metaagent.rollout.engine import RolloutEngine, RolloutObserver, derive_seed
from metaagent.rollout.metrics import rollout_metrics
from metaagent.rollout.records import RolloutTree, TreeWriter
from metaagent.train.config import TrainConfig
from metaagent.train.metrics import MetricsLogger

ROLE_NAMES = {frozenset({"executor"}): "executor", frozenset({"designer"}): "designer"}


class TrainError(RuntimeError):
    """The run cannot start or continue; the message says why and what to do."""


@dataclass
class StepResult:
    step: int
    metrics: dict[str, Any]
    trees: list[RolloutTree]


def active_name(active: frozenset[str]) -> str:
    return ROLE_NAMES.get(active, "both" if active else "none")


def load_tasks(specs: list[dict[str, Any]]):
    from metaagent.data import DatasetSpec, load_tasks as load

    tasks = []
    for spec in specs:
        tasks.extend(load(DatasetSpec(**spec)))
    return tasks


class Trainer:
    """The local backend: one process, rollout and update on the same in-memory models (CPU or one GPU).

    Args:
        config: the resolved run configuration.
        resume: a checkpoint folder, or True for the newest checkpoint of ``config.trainer.out``.
        observer: rollout progress hooks (the CLI's display).
    """

    def __init__(self, config: TrainConfig, *, resume: str | bool | None = None, observer: RolloutObserver | None = None):
        from metaagent.data import MixtureSampler
        from metaagent.train.models import load_models, make_updaters
        from metaagent.train.schedule import StageSchedule

        self.config = cfg = config
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
        self.sampler = MixtureSampler(self.train_tasks, batch_size=cfg.data.batch_size, ratio=ratio, seed=cfg.trainer.seed)

        self.models = load_models(cfg.policy)
        self.updaters = make_updaters(self.models, cfg.optim)
        self.start_step = 0
        run_info = self._run_info()
        checkpoint = self._find_checkpoint(resume)
        if checkpoint is not None:
            self.start_step = self._restore(checkpoint)
            run_info = json.loads((self.run_dir / "run.json").read_text())
        else:
            (self.run_dir / "run.json").write_text(json.dumps(run_info, indent=2))
            (self.run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        self.run_id = run_info["run_id"]

        self.engine = RolloutEngine(
            designer=self.models.designer,
            executor=self.models.executor(),
            config=cfg.rollout,
            reward_config=cfg.reward_config(),
            run_id=self.run_id,
            record_config=cfg.to_dict(),
            observer=observer or RolloutObserver(),
        )
        self.logger = MetricsLogger(
            self.run_dir,
            tensorboard=cfg.trainer.tensorboard,
            resume_step=self.start_step - 1 if checkpoint is not None else None,
        )

    # ---- set-up helpers -----------------------------------------------------------------------------------

    def _run_info(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "run_id": f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
            "seed": cfg.trainer.seed,
            "models": self.models.model_ids(),
            "metaagent_version": __version__,
            "created_at": time.time(),
            "backend": "local",
        }

    def _find_checkpoint(self, resume: str | bool | None) -> Path | None:
        from metaagent.train.checkpoint import latest_checkpoint

        if not resume:
            return None
        if resume is True:
            path = latest_checkpoint(self.run_dir)
            if path is None:
                raise TrainError(f"--resume: no checkpoint under {self.run_dir}/checkpoints; start without --resume")
            return path
        path = Path(resume)
        if not (path / "meta.json").is_file():
            raise TrainError(f"--resume {path}: not a checkpoint folder (no meta.json)")
        return path

    def _restore(self, path: Path) -> int:
        from metaagent.train.checkpoint import load_checkpoint

        state = load_checkpoint(path, models=self.models.models, optimizers=self.updaters)
        self.sampler.load_state_dict(state["sampler"])
        if state.get("config_hash") != _config_hash(self.config):
            # the schedule and data order are only reproducible with the same config
            print(f"warning: resuming {path} with a different config than it was saved with")
        return int(state["next_step"])

    def save(self, next_step: int) -> Path:
        from metaagent.train.checkpoint import save_checkpoint

        return save_checkpoint(
            self.run_dir,
            next_step,
            models=self.models.models,
            tokenizers=self.models.tokenizers,
            optimizers=self.updaters,
            state={
                "next_step": next_step,
                "sampler": self.sampler.state_dict(),
                "schedule": self.schedule.state_dict(),
                "config_hash": _config_hash(self.config),
                "run_id": self.run_id,
            },
        )

    # ---- the loop -----------------------------------------------------------------------------------------

    def train_step(self, step: int) -> StepResult:
        from metaagent.credit import assign_credit
        from metaagent.train.models import temperatures
        from metaagent.train.samples import build_samples
        from metaagent.train.update import update_routed

        cfg = self.config
        t_start = time.perf_counter()
        active = self.schedule.active_roles(step)
        stage = self.schedule.stage(step)
        tasks = self.sampler.next_batch()

        trees = self.engine.rollout(tasks, step=step, seed=derive_seed(cfg.trainer.seed, step, "rollout"))
        t_rollout = time.perf_counter() - t_start

        credit = assign_credit(
            trees,
            cfg.algo.estimator,
            eps=cfg.algo.eps,
            norm_by_std=cfg.algo.norm_by_std,
            filter_zero_var=cfg.algo.filter_zero_var,
            **({"executor_group": cfg.algo.executor_group} if cfg.algo.estimator == "hierarchical" else {}),
        )
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
        t_update = time.perf_counter()
        update_metrics = update_routed(self.updaters, samples, self.models.role_to_key, active_roles=active)
        t_end = time.perf_counter()

        metrics: dict[str, Any] = {
            "schedule/active": active_name(active),
            "schedule/stage": stage.index,
            **rollout_metrics(trees),
            **credit.metrics,
            **samples.metrics,
            **update_metrics,
            "time/rollout_s": t_rollout,
            "time/design_s": max((t.timings.get("design_s", 0.0) for t in trees), default=0.0),
            "time/reward_s": sum(t.timings.get("reward_s", 0.0) for t in trees),
            "time/update_s": t_end - t_update,
            "time/step_s": t_end - t_start,
        }
        self.logger.log(step, metrics)
        return StepResult(step, metrics, trees)

    def validate(self, step: int) -> dict[str, Any]:
        """One design per task (greedy by default), ``val_repeats`` repeats; metrics under ``val/``."""
        cfg = self.config
        greedy = cfg.trainer.val_greedy
        designer = cfg.rollout.designer.params().replace(temperature=0.0) if greedy else None
        executor = cfg.rollout.executor.params().replace(temperature=0.0) if greedy else None
        trees = self.engine.rollout(
            self.val_tasks,
            step=step,
            seed=derive_seed(cfg.trainer.seed, "val"),
            mode="eval",
            m_designs=cfg.trainer.val_repeats,
            n_executions=1,
            designer_sampling=designer,
            executor_sampling=executor,
        )
        with TreeWriter(self._rollout_path(step, prefix="val_"), truncate=True) as w:
            for tree in trees:
                w.write(tree)
        metrics = {"val/" + k.split("/", 1)[1]: v for k, v in rollout_metrics(trees).items()}
        self.logger.log(step, metrics)
        return metrics

    def train(self, on_step=None) -> list[StepResult]:
        """Run from ``start_step`` to ``trainer.steps``; checkpoint every ``save_every`` steps and at exit."""
        cfg = self.config.trainer
        results = []
        last_saved = None
        step = self.start_step
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
        self.engine.close()
        self.models.close()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rollout_path(self, step: int, prefix: str = "") -> Path:
        return self.run_dir / "rollouts" / f"{prefix}step_{step:06d}.jsonl"


def _config_hash(cfg: TrainConfig) -> str:
    from metaagent.rollout.records import config_hash

    d = cfg.to_dict()
    d["trainer"] = {k: v for k, v in d["trainer"].items() if k not in ("steps", "out")}
    return config_hash(d)
