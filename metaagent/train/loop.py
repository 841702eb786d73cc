"""The training loop both backends share (paper §3): schedule, data, rollout, credit, samples, run directory.

One step::

    active  = schedule.active_roles(t)                      Eq. 9: executor stage first, K steps each
    tasks   = sampler.next_batch()                          half math, half code
    trees   = engine.rollout(tasks, step=t)                 M designs x N executions per task (records)
    credit  = assign_credit(trees, "hierarchical")          Eq. 4-7, advantages written into the trees
    samples = build_samples(trees, active_roles=active)     inactive role: not even built
    update(samples)                                         the backend's part: Eq. 2-3 PPO-clip per model

A backend (:class:`metaagent.train.trainer.Trainer` for CPU / one GPU, the verl trainer for clusters)
supplies the models: the rollout policies, ``_update``, ``save`` and ``_restore``. Everything a step
produces is written to the run directory, identical for both backends::

    RUN/config.yaml  run.json  metrics.jsonl  rollouts/step_000000.jsonl  checkpoints/step_00000030/
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from metaagent import __version__
from metaagent.errors import MetaAgentError
from metaagent.records import DESIGNER, EXECUTOR, RolloutTree, TreeWriter
from metaagent.rollout.engine import RolloutEngine, RolloutObserver
from metaagent.rollout.metrics import rollout_metrics
from metaagent.seeding import derive_seed
from metaagent.train.config import TrainConfig
from metaagent.learn.metrics import MetricsLogger, cuda_peak_mib
from metaagent.learn.trackers import step_samples

ROLE_NAMES = {frozenset({EXECUTOR}): EXECUTOR, frozenset({DESIGNER}): DESIGNER}


log = logging.getLogger(__name__)

class TrainError(MetaAgentError, RuntimeError):
    """The run cannot start or continue; the message says why and what to do."""


@dataclass
class StepResult:
    step: int
    metrics: dict[str, Any]
    trees: list[RolloutTree]


def active_name(active: frozenset[str]) -> str:
    return ROLE_NAMES.get(active, "both" if active else "none")


def load_tasks(specs: list[dict[str, Any]]):
    from metaagent.data import DatasetSpec
    from metaagent.data import load_tasks as load

    tasks = []
    for spec in specs:
        tasks.extend(load(DatasetSpec(**spec)))
    return tasks


def config_hash(cfg: TrainConfig) -> str:
    """Hash of the settings that decide the schedule and data order (not the length or the folder)."""
    from metaagent.records import config_hash as record_hash

    d = cfg.to_dict()
    # where metrics go does not decide anything either: a resumed run may add or drop a tracker
    d["trainer"] = {k: v for k, v in d["trainer"].items() if k not in ("steps", "out", "loggers", "tracker_project")}
    return record_hash(d)


class TrainLoop:
    """Schedule, data, rollout, credit and the run directory; subclasses own the models.

    A subclass calls :meth:`_init_data` first (a fresh run in a folder that holds an earlier run moves the
    earlier run aside to ``OUT.<its run id>``), loads its models, then :meth:`_open_run` with the rollout
    policies, and implements ``_update(samples, step, active)``, ``save(next_step)``, ``_restore(path)``.
    """

    backend = "local"
    supports_token_advantages = False  # the update trains on Sample.token_advantages (token-stage estimators)
    supports_critic = False  # the backend trains a value model per model (GAE token stages: unity mode gae)
    config: TrainConfig
    engine: RolloutEngine
    logger: MetricsLogger

    # ---- set-up ---------------------------------------------------------------------------------------------

    def _init_data(self, config: TrainConfig, resume: str | bool | None) -> None:
        from metaagent.data import MixtureSampler
        from metaagent.train.schedule import StageSchedule

        from metaagent.learn.trackers import check_available

        self.config = cfg = config
        check_available(cfg.trainer.active_loggers())  # a missing tracker package stops the run before it starts
        self.run_dir = Path(cfg.trainer.out)
        if not resume and (self.run_dir / "run.json").is_file():
            self._move_aside_previous_run()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.schedule = StageSchedule(cfg.schedule.mode, cfg.schedule.stage_len)
        self.train_tasks = load_tasks(cfg.data.train)
        if not self.train_tasks:
            raise TrainError("data.train yielded no tasks; check the dataset specs in the config")
        self.isolation = _isolation_for_training(cfg, self.train_tasks)
        self.val_tasks = load_tasks(cfg.data.val)[: cfg.trainer.val_tasks] if cfg.trainer.val_every else []
        ratio = {"math": cfg.data.math_fraction, "code": 1.0 - cfg.data.math_fraction}
        present = {t.domain for t in self.train_tasks}
        ratio = {d: r for d, r in ratio.items() if r > 0 and d in present} or {d: 1.0 for d in present}
        self.sampler = MixtureSampler(
            self.train_tasks, batch_size=cfg.data.batch_size, ratio=ratio, seed=cfg.trainer.seed
        )

    def _move_aside_previous_run(self) -> None:
        """A fresh run never appends to an old one: the old run directory is renamed, not deleted."""
        try:
            old_id = json.loads((self.run_dir / "run.json").read_text())["run_id"]
        except (OSError, ValueError, KeyError):
            old_id = time.strftime("%Y%m%d-%H%M%S")
        backup = self.run_dir.with_name(f"{self.run_dir.name}.{old_id}")
        os.rename(self.run_dir, backup)
        log.warning(
            "%s held the earlier run %s; moved it to %s (pass --resume to continue a run instead)",
            self.run_dir, old_id, backup,
        )  # fmt: skip

    def _open_run(
        self, checkpoint: Path | None, *, designer: Any, executor: Any, observer: RolloutObserver | None
    ) -> None:
        """Restore ``checkpoint`` (or write run.json and config.yaml), then start the engine and the log."""
        cfg = self.config
        stage = self._token_stage()
        if stage is not None and stage.needs_values(self._credit_options()) and not self.supports_critic:
            raise TrainError(
                f"algo.estimator={cfg.algo.estimator} with these options needs a critic per model, which the "
                f"{self.backend} backend does not train; use trainer.backend=local or verl"
            )
        if stage is not None and not self.supports_token_advantages:
            raise TrainError(
                f"algo.estimator={cfg.algo.estimator} computes per-token advantages, which the {self.backend} backend "
                "does not train on yet; use trainer.backend=local"
            )
        self.start_step = 0
        if checkpoint is not None:
            self.start_step = self._restore(checkpoint)
            run_info = json.loads((self.run_dir / "run.json").read_text())
        else:
            run_info = self._run_info()
            (self.run_dir / "run.json").write_text(json.dumps(run_info, indent=2))
            (self.run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        self.run_id = run_info["run_id"]
        self.coach = None
        if cfg.coach.backend is not None:
            from metaagent.rewards.coach import Coach

            self.coach = Coach(cfg.coach)
        self.engine = RolloutEngine(
            designer=designer,
            executor=executor,
            config=cfg.rollout,
            reward_config=cfg.reward_config(),
            run_id=self.run_id,
            record_config=cfg.to_dict(),
            observer=observer or RolloutObserver(),
            turn_scorer=self.coach.score_execution if self.coach is not None else None,
        )
        self.logger = MetricsLogger(
            self.run_dir,
            loggers=cfg.trainer.active_loggers(),
            resume_step=self.start_step - 1 if checkpoint is not None else None,
            run_id=self.run_id,
            project=cfg.trainer.tracker_project,
            config=None if checkpoint is not None else {**cfg.to_dict(), "run": run_info},
        )

    def _run_info(self) -> dict[str, Any]:
        return {
            "run_id": f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
            "seed": self.config.trainer.seed,
            "models": self._model_ids(),
            "metaagent_version": __version__,
            "created_at": time.time(),
            "backend": self.backend,
            "isolation": self.isolation.describe(),
        }

    def _find_checkpoint(self, resume: str | bool | None) -> Path | None:
        from metaagent.learn.checkpoint import latest_checkpoint

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

    def _loop_state(self, next_step: int) -> dict[str, Any]:
        """What a checkpoint needs besides the models to continue bit for bit."""
        return {
            "next_step": next_step,
            "sampler": self.sampler.state_dict(),
            "schedule": self.schedule.state_dict(),
            "config_hash": config_hash(self.config),
            "run_id": self.run_id,
        }

    def _load_loop_state(self, state: dict[str, Any], path: Path) -> int:
        self.sampler.load_state_dict(state["sampler"])
        if state.get("config_hash") != config_hash(self.config):
            # the schedule and data order are only reproducible with the same config
            log.warning("resuming %s with a different config than it was saved with", path)
        return int(state["next_step"])

    # ---- backend hooks -------------------------------------------------------------------------------------

    def _model_ids(self) -> dict[str, str]:
        raise NotImplementedError

    def _restore(self, path: Path) -> int:
        raise NotImplementedError

    def save(self, next_step: int) -> Path:
        raise NotImplementedError

    def _update(self, samples: Any, step: int, active: frozenset[str], pairs: Any = ()) -> dict[str, Any]:
        raise NotImplementedError

    def _reset_optimizer_moments(self) -> None:
        """``optim.stage_switch: reset``: forget the optimizer moments at a stage boundary (backend-specific)."""
        raise NotImplementedError(f"{type(self).__name__} does not support optim.stage_switch=reset")

    def _ref_logprobs(self, samples: Any) -> list[list[float]]:
        """Reference log-probs of every response token of ``samples`` (the pre-pass of token stages)."""
        raise TrainError(
            f"the {self.backend} backend has no reference pre-pass: algo.estimator={self.config.algo.estimator} "
            "with a KL term in the reward runs on the local backend (or set its beta to 0)"
        )

    def _model_key(self, sample: Any) -> str:
        """The physical model that trains ``sample`` (per-model normalisation of token stages)."""
        return "policy"

    def _values(self, samples: Any) -> list[list[float]]:
        """The critic's values ``V_t`` of every response token of ``samples`` (GAE token stages)."""
        raise TrainError(f"the {self.backend} backend has no critic; GAE estimators run on trainer.backend=local or verl")

    def _token_stage(self) -> Any:
        """The estimator's token stage when it is active for the configured options, else None."""
        from metaagent.credit import get_token_stage

        return get_token_stage(self.config.algo.estimator, self._credit_options())

    def _token_stage_needs_ref(self) -> bool:
        stage = self._token_stage()
        return stage is not None and stage.needs_ref(self._credit_options())

    def _token_stage_needs_values(self) -> bool:
        stage = self._token_stage()
        return stage is not None and stage.needs_values(self._credit_options())

    def _check_samples(self, trees: list[RolloutTree], samples: Any) -> dict[str, Any]:
        """Extra consistency metrics of a backend (default none)."""
        return {}

    # ---- the loop ------------------------------------------------------------------------------------------

    def _credit_options(self) -> dict[str, Any]:
        """The estimator's keyword options: the ``algo`` fields it takes, then ``algo.options``."""
        from metaagent.credit import estimator_options

        a = self.config.algo
        known = estimator_options(a.estimator)
        common = {
            "eps": a.eps,
            "norm_by_std": a.norm_by_std,
            "filter_zero_var": a.filter_zero_var,
            "executor_group": a.executor_group,
            "executor_unit": a.executor_unit,
            "executor_balance": self.config.executor_balance(),
        }
        if "role_models" in known and self.config.policy.role_models:
            common["role_models"] = dict(self.config.policy.role_models)  # per-model normalisation
        return {**{k: v for k, v in common.items() if k in known}, **dict(a.options)}

    def _post_rollout(self, trees: list[RolloutTree]) -> dict[str, Any]:
        """Work the estimator needs written into the records before it runs (a pure function over them):
        evaluation-aligned credit's coalition re-runs, judges, bisection and pairs, then its protocol metrics."""
        if self.config.algo.estimator != "eval_aligned":
            return {}
        from metaagent.credit.eval_aligned import protocol_metrics
        from metaagent.rollout.eval_aligned import EvalAlignedStage

        stage = getattr(self, "_eval_aligned_stage", None)
        if stage is None:
            reference = None
            if self.config.eval_aligned.baseline == "reference":
                from metaagent.policy.factory import build_policy

                reference = build_policy(self.config.policy.backend, self.config.policy.model_for(EXECUTOR))
            stage = self._eval_aligned_stage = EvalAlignedStage(
                self.engine, self.config.eval_aligned, self._credit_options(), reference=reference
            )
        return {**stage.annotate(trees), **protocol_metrics(trees, **self._credit_options())}

    def _dynamic_sampling(self, trees: list[RolloutTree], step: int, active: frozenset[str]):
        """DAPO's dynamic sampling per role (:mod:`metaagent.train.dynamic_sampling`): the kept trees and
        ``rollout/dynamic_sampling/*``. Extra draws come from the same sampler (its checkpointed state
        advances) with a seed per round, so a resumed run draws the same tasks."""
        from metaagent.train.dynamic_sampling import group_targets, sample_informative

        cfg = self.config

        def draw(round_: int, n: int) -> list[RolloutTree]:
            tasks = self.sampler.next_batch()[:n]
            seed = derive_seed(cfg.trainer.seed, step, "rollout", "dynamic", round_)
            return self.engine.rollout(tasks, step=step, seed=seed)

        return sample_informative(
            trees,
            draw,
            roles=active,
            targets=group_targets(cfg.data.batch_size, cfg.rollout.m_designs, cfg.algo.executor_group),
            max_extra_tasks=cfg.algo.dynamic_sampling.max_extra_tasks,
            batch_size=cfg.data.batch_size,
            executor_group=cfg.algo.executor_group,
            executor_unit=cfg.algo.executor_unit,
        )

    def _annotate(self, trees: list[RolloutTree]) -> dict[str, Any]:
        """Everything written into the records between the rollout and the (pure) estimator, in order:
        evaluation-aligned credit's re-runs and judges, the coach's per-action scores (scored during the rollout;
        here their metrics) and the turn-reward allocator (UnityMAS-O)."""
        cfg = self.config
        metrics: dict[str, Any] = self._post_rollout(trees)
        if self.coach is not None:
            from metaagent.rewards.coach import coach_metrics

            metrics.update(self.coach.take_metrics())
            metrics.update(coach_metrics(trees))
        if cfg.turn_reward.allocator is not None:
            from metaagent.rewards.turn import allocate_turn_rewards, turn_reward_metrics

            metrics.update(allocate_turn_rewards(trees, cfg.turn_reward.allocator, **cfg.turn_reward.options))
            metrics.update(turn_reward_metrics(trees))
        if cfg.algo.overlong.buffer > 0:  # DAPO Eq. 13 on the execution rewards, before the estimator
            from metaagent.rewards.overlong import apply_overlong_penalty

            o = cfg.algo.overlong
            metrics.update(
                apply_overlong_penalty(
                    trees, max_len=cfg.rollout.executor.max_tokens, buffer=o.buffer, penalty_factor=o.penalty_factor
                )
            )
        return metrics

    def _adaptive_metrics(self, trees: list[RolloutTree]) -> dict[str, float]:
        """``rollout/adaptive/*`` (:mod:`metaagent.rollout.adaptive`) when ``rollout.adaptive_budget`` is on."""
        from metaagent.rollout.adaptive import adaptive_metrics

        r = self.config.rollout
        if not r.adaptive_budget.enabled:
            return {}
        return adaptive_metrics(trees, r.n_executions, r.adaptive_budget.first_n)

    def train_step(self, step: int) -> StepResult:
        from metaagent.credit import assign_credit
        from metaagent.train.models import temperatures
        from metaagent.train.token_stage import apply_token_stage
        from metaagent.learn.samples import build_pair_samples, build_samples, mask_overlong

        cfg = self.config
        t_start = time.perf_counter()
        cuda_peak_mib()  # the step's peaks start here
        active = self.schedule.active_roles(step)
        stage = self.schedule.stage(step)
        tasks = self.sampler.next_batch()

        trees = self.engine.rollout(tasks, step=step, seed=derive_seed(cfg.trainer.seed, step, "rollout"))
        sampling_metrics: dict[str, Any] = {}
        if cfg.algo.dynamic_sampling.enabled:
            trees, sampling_metrics = self._dynamic_sampling(trees, step, active)
        t_rollout = time.perf_counter() - t_start
        memory = {"memory/cuda_peak_rollout_mib": cuda_peak_mib()}
        annotation_metrics = self._annotate(trees)
        credit = assign_credit(trees, cfg.algo.estimator, **self._credit_options())
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
        if cfg.algo.overlong.filter:  # DAPO's overlong filtering: truncated generations out of the loss
            samples = mask_overlong(samples, cfg.algo.overlong.filter_roles)
        token_stage = self._token_stage()
        if token_stage is not None:  # per-token advantages after a reference / critic pre-pass over the whole batch
            samples = apply_token_stage(
                samples, token_stage, self._credit_options(), ref_logprobs=self._ref_logprobs, group_of=self._model_key,
                values=self._values,
            )  # fmt: skip
        checks = self._check_samples(trees, samples)
        t_update = time.perf_counter()
        switched = step > 0 and self.schedule.stage(step - 1).index != stage.index
        if switched and cfg.optim.stage_switch == "reset":
            self._reset_optimizer_moments()
        pairs = build_pair_samples(trees, active_roles=active)
        if pairs and not cfg.optim.dpo:
            samples.metrics["samples/preference_pairs_unused"] = float(len(pairs))  # optim.dpo=true trains on them
            pairs = []
        update_metrics = self._update(samples, step, active, pairs)
        t_end = time.perf_counter()
        memory["memory/cuda_peak_update_mib"] = cuda_peak_mib()  # credit, samples and the update

        metrics: dict[str, Any] = {
            "schedule/active": active_name(active),
            "schedule/stage": stage.index,
            "schedule/switched": float(switched),
            **rollout_metrics(trees),
            **self._adaptive_metrics(trees),
            **sampling_metrics,
            **annotation_metrics,
            **credit.metrics,
            **checks,
            **samples.metrics,
            **update_metrics,
            "time/rollout_s": t_rollout,
            "time/design_s": max((t.timings.get("design_s", 0.0) for t in trees), default=0.0),
            "time/reward_s": sum(t.timings.get("reward_s", 0.0) for t in trees),
            **({"time/judge_s": sum(t.timings.get("judge_s", 0.0) for t in trees)} if self.coach is not None else {}),
            "time/update_s": t_end - t_update,
            "time/step_s": t_end - t_start,
            **{k: v for k, v in memory.items() if v is not None},
        }
        self.logger.log(step, metrics)
        self.logger.log_samples(step, step_samples(trees))
        return StepResult(step, metrics, trees)

    def validate(self, step: int) -> dict[str, Any]:
        """``val_repeats`` samples per task (greedy by default) by :mod:`metaagent.eval`'s ``auto`` method,
        the code behind ``metaagent-eval``; metrics under ``val/`` (the rollout metrics and avg@k/pass@k)."""
        from metaagent.eval import AUTO, Method, rollout_tasks, tree_metrics

        cfg = self.config
        greedy = cfg.trainer.val_greedy
        n = cfg.trainer.val_repeats
        seed = derive_seed(cfg.trainer.seed, "val")
        trees = rollout_tasks(
            self.engine,
            self.val_tasks,
            Method(AUTO, AUTO),
            n=n,
            seed=seed,
            step=step,
            designer_sampling=cfg.rollout.designer.params().replace(temperature=0.0) if greedy else None,
            executor_sampling=cfg.rollout.executor.params().replace(temperature=0.0) if greedy else None,
        )
        with TreeWriter(self._rollout_path(step, prefix="val_"), truncate=True) as w:
            for tree in trees:
                w.write(tree)
        metrics = {"val/" + k.split("/", 1)[1]: v for k, v in rollout_metrics(trees).items()}
        metrics.update(tree_metrics(trees, sorted({1, n}), prefix="val/", seed=seed))
        self.logger.log(step, metrics)
        return metrics

    def train(self, on_step: Callable[[StepResult], None] | None = None) -> list[StepResult]:
        """Run from ``start_step`` to ``trainer.steps``; checkpoint every ``save_every`` steps and at the end."""
        cfg = self.config.trainer
        results: list[StepResult] = []
        last_saved = None
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
        coach = getattr(self, "coach", None)
        if coach is not None:
            coach.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rollout_path(self, step: int, prefix: str = "") -> Path:
        return self.run_dir / "rollouts" / f"{prefix}step_{step:06d}.jsonl"


def _isolation_for_training(cfg: TrainConfig, tasks: list[Any]) -> Any:
    """The isolation layer of this run's model-written code (``execution.isolation``); training on code
    tasks refuses to start without one unless the config accepts that with ``execution.isolation=none``."""
    from metaagent.execution.isolation import IsolationError, for_config

    code = any(getattr(t, "domain", None) == "code" for t in tasks) and cfg.data.math_fraction < 1.0
    try:
        return for_config(cfg.execution, purpose="train", code_tasks=code)
    except IsolationError as e:
        raise TrainError(str(e)) from None
