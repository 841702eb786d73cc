"""The training loop both backends share (paper §3): schedule, data, rollout, credit, samples, run directory.

One step is :meth:`TrainLoop.train_step` (its docstring lists the stages). The loop composes a backend
(:class:`metaagent.train.backend.Backend`: :class:`metaagent.train.local.LocalBackend` for CPU / one GPU,
:class:`metaagent.train.verl_backend.backend.VerlBackend` for clusters), which owns the models: the rollout policies,
the update, the token stage's pre-passes, checkpoints. Everything a step
produces is written to the run directory (:mod:`metaagent.train.run_dir`), identical for every backend::

    RUN/config.yaml  run.json  metrics.jsonl  rollouts/step_000000.jsonl  checkpoints/step_00000030/
"""

from __future__ import annotations

import copy
import logging
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metaagent.data import DataError, DatasetSpec, MixtureSampler
from metaagent.data import load_tasks as load_dataset
from metaagent.data.mixture import batch_shares
from metaagent.domain import get_domain, use_rewards
from metaagent.execution.isolation import IsolationError, for_config
from metaagent.interrupts import StopSignalScope
from metaagent.learn.metrics import MetricsLogger, cuda_peak_mib
from metaagent.learn.trackers import check_available, step_samples
from metaagent.records import DESIGNER, EXECUTOR, RolloutTree
from metaagent.rewards.coach import Coach
from metaagent.rollout.engine import RolloutEngine, RolloutObserver
from metaagent.rollout.metrics import rollout_metrics
from metaagent.seeding import derive_seed
from metaagent.train.backend import Backend, Needs, make_backend
from metaagent.train.config import TrainConfig
from metaagent.train.errors import TrainError
from metaagent.train.reward_stages import StageContext, run_stages
from metaagent.train.run_dir import RunDirectory, config_hash, new_run_info

ROLE_NAMES = {frozenset({EXECUTOR}): EXECUTOR, frozenset({DESIGNER}): DESIGNER}


log = logging.getLogger(__name__)

__all__ = [
    "StepResult", "TrainError", "TrainInterrupted", "TrainLoop", "batch_mix", "config_hash", "load_tasks",
]  # fmt: skip


class TrainInterrupted(TrainError):
    """A stop signal ended the run after ``next_step`` steps, with a checkpoint of them (``--resume`` goes on
    from there, bit for bit as if the run had not stopped)."""

    def __init__(self, signum: int, next_step: int, checkpoint: Path | None) -> None:
        self.signum, self.next_step, self.checkpoint = signum, next_step, checkpoint
        super().__init__(f"interrupted after step {next_step}; continue with --resume")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _Stopper(StopSignalScope):
    """SIGINT / SIGTERM during :meth:`TrainLoop.train` (installed in the main thread only).

    1st signal: the current step finishes (rollout, update, validation), a checkpoint of it is written, and
    the run ends with :class:`TrainInterrupted`. 2nd signal before the step's update began: the step is
    abandoned: the sampler and RNG states taken when it started are put back and checkpointed at once with
    the weights (which the rollout does not change), so the resumed run draws the same step again; the
    process then waits for the rollout's model calls already in flight (the engine's thread pools cannot
    cancel them). During the update the 2nd signal is refused (a half-applied optimizer step cannot be
    checkpointed) and the step finishes. 3rd signal: the process exits now; the newest complete checkpoint
    stays (writes are atomic).
    """

    def __init__(self, loop: TrainLoop) -> None:
        self.loop, self.signum, self.count = loop, None, 0
        self.step = loop.start_step  # the step running (or next)
        self.snapshot: tuple[dict[str, Any], dict[str, Any]] | None = None  # sampler, RNG at the step's start

    def step_started(self, step: int) -> None:
        from metaagent.learn.checkpoint import capture_rng_state

        self.step = step
        self.snapshot = (copy.deepcopy(self.loop.sampler.state_dict()), capture_rng_state())

    def update_started(self) -> None:
        self.snapshot = None  # from here the weights move: the step can only be finished

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        self.signum = self.signum or signum
        name = signal.Signals(signum).name
        if self.count == 1:
            _say(f"{name}: finishing step {self.step}, then a checkpoint (send it again to abandon the step)")
        elif self.count == 2 and self.snapshot is not None:
            raise self._abandon()
        elif self.count == 2:
            _say(f"{name}: step {self.step} is updating the weights; it finishes and is checkpointed first")
        else:
            newest = self.loop.run.newest_checkpoint()
            where = newest.name if newest else "the start"
            _say(f"{name}: stopped now; continue with --resume (from {where})")
            os._exit(128 + self.signum)

    def _abandon(self) -> TrainInterrupted:
        """Checkpoint the state the current step started from; the interruption to raise."""
        from metaagent.learn.checkpoint import restore_rng_state

        assert self.snapshot is not None
        sampler, rng = self.snapshot
        self.loop.sampler.load_state_dict(sampler)
        restore_rng_state(rng)
        _say(f"abandoning step {self.step}: writing the checkpoint it started from")
        path = self.loop.save(self.step)
        _say("checkpoint written; waiting for the model calls in flight (send it again to exit now)")
        return TrainInterrupted(self.signum or signal.SIGINT, self.step, path)


def _say(text: str) -> None:
    print(f"train-metaagent: {text}", file=sys.stderr, flush=True)


@dataclass
class StepResult:
    step: int
    metrics: dict[str, Any]
    trees: list[RolloutTree]


def active_name(active: frozenset[str]) -> str:
    return ROLE_NAMES.get(active, "both" if active else "none")


def load_tasks(specs: list[dict[str, Any]]):
    tasks = []
    for spec in specs:
        tasks.extend(load_dataset(DatasetSpec(**spec)))
    return tasks


def credit_options(cfg: TrainConfig) -> dict[str, Any]:
    """The estimator's keyword options: the ``algo`` fields it takes, then ``algo.options``."""
    from metaagent.credit import estimator_options

    a = cfg.algo
    known = estimator_options(a.estimator)
    common = {
        "eps": a.eps,
        "norm_by_std": a.norm_by_std,
        "filter_zero_var": a.filter_zero_var,
        "executor_group": a.executor_group,
        "executor_unit": a.executor_unit,
        "executor_balance": cfg.executor_balance(),
    }
    if a.designer_baseline != "group":  # the default passes today's options unchanged (verl's estimators too)
        common["designer_baseline"] = a.designer_baseline
    if "role_models" in known and cfg.policy.role_models:
        common["role_models"] = dict(cfg.policy.role_models)  # per-model normalisation
    return {**{k: v for k, v in common.items() if k in known}, **dict(a.options)}


class TrainLoop:
    """Schedule, data, rollout, credit and the run directory, over a :class:`~metaagent.train.backend.Backend`
    that owns the models.

    Args:
        config: the resolved run configuration.
        backend: the models; None builds the one ``config.trainer.backend`` names
            (:func:`metaagent.train.backend.make_backend`: :class:`metaagent.train.local.LocalBackend`,
            :class:`metaagent.train.verl_backend.backend.VerlBackend` or a plugin's).
        resume: a checkpoint folder, or True for the newest checkpoint of ``config.trainer.out``.
        observer: rollout progress hooks (the CLI's display).

    Set-up, in order: the configuration is checked against the backend's capabilities; the data and the run
    directory are prepared (a fresh run in a folder that holds an earlier run moves the earlier run aside to
    ``OUT.<its run id>``); the backend loads its models; the checkpoint is restored (or run.json and
    config.yaml written); the rollout engine and the metrics log start. The loop closes the backend.
    """

    config: TrainConfig
    run: RunDirectory
    engine: RolloutEngine
    logger: MetricsLogger
    _stopper: _Stopper | None = None  # the stop-signal handler while train() runs

    @property
    def run_dir(self) -> Path:
        """The run directory's folder (``config.trainer.out``)."""
        return self.run.path

    def __init__(
        self,
        config: TrainConfig,
        backend: Backend | None = None,
        *,
        resume: str | bool | None = None,
        observer: RolloutObserver | None = None,
    ) -> None:
        from metaagent.credit import get_token_stage

        self.config = config
        self.backend = backend if backend is not None else make_backend(config)
        try:
            self.credit_options = credit_options(config)
            self.token_stage = get_token_stage(config.algo.estimator, self.credit_options)
            self._check_capabilities()
            self._init_data(resume)
            checkpoint = self.run.find_checkpoint(resume)  # before the models load: a bad --resume fails fast
            stage, options = self.token_stage, self.credit_options
            self.backend.start(Needs(
                ref_logprobs=stage is not None and stage.needs_ref(options),
                values=stage is not None and stage.needs_values(options),
            ))  # fmt: skip
            self._open_run(checkpoint, observer)
        except BaseException:
            self.close()
            raise

    # ---- set-up ---------------------------------------------------------------------------------------------

    def _check_capabilities(self) -> None:
        """Refuse, in one line, a configuration that needs what the backend cannot train."""
        cfg, stage, can = self.config, self.token_stage, self.backend.capabilities
        name = self.backend.name
        if stage is not None and stage.needs_values(self.credit_options) and not can.critic:
            raise TrainError(
                f"algo.estimator={cfg.algo.estimator} with these options needs a critic per model, which the "
                f"{name} backend does not train; use trainer.backend=local or verl"
            )
        if stage is not None and cfg.algo.normalize != "none":
            raise TrainError(
                f"algo.normalize={cfg.algo.normalize} scales one advantage per sample, but algo.estimator="
                f"{cfg.algo.estimator} computes per-token advantages; use algo.normalize=none with it"
            )
        if stage is not None and not can.token_advantages:
            raise TrainError(
                f"algo.estimator={cfg.algo.estimator} computes per-token advantages, which the {name} backend "
                "does not train on yet; use trainer.backend=local"
            )
        if stage is not None and stage.needs_ref(self.credit_options) and not can.ref_logprobs:
            raise TrainError(
                f"the {name} backend has no reference pre-pass: algo.estimator={cfg.algo.estimator} "
                "with a KL term in the reward runs on the local backend (or set its beta to 0)"
            )
        if cfg.optim.stage_switch == "reset" and not can.reset_moments:
            raise TrainError(
                f"the {name} backend does not support optim.stage_switch=reset; use keep or trainer.backend=local"
            )
        if cfg.optim.dpo and not can.preference_pairs:
            raise TrainError(
                "the DPO loss on preference pairs (optim.dpo) runs on the local backend only for now; "
                "set optim.dpo=false or trainer.backend=local"
            )

    def _init_data(self, resume: str | bool | None) -> None:
        cfg = self.config
        check_available(cfg.trainer.active_loggers())  # a missing tracker package stops the run before it starts
        use_rewards(cfg.data.rewards)  # data.rewards: each domain's reward(task, answer), before any scoring
        self.run = RunDirectory(cfg.trainer.out)
        self.run.prepare(resume)
        self.schedule = cfg.schedule.build()
        self.train_tasks = load_tasks(cfg.data.train)
        if not self.train_tasks:
            raise TrainError("data.train yielded no tasks; check the dataset specs in the config")
        mix = batch_mix(cfg, self.train_tasks)
        if cfg.algo.designer_baseline == "control":
            solo = sorted({t.domain for t in self.train_tasks if get_domain(t.domain).solo_script is None})
            if solo:
                raise TrainError(
                    f"algo.designer_baseline=control runs one agent per task, but domain(s) {solo} have no "
                    "single-agent script (Domain.solo_script); use algo.designer_baseline=group"
                )
        self.isolation = _isolation_for_training(cfg, self.train_tasks)
        self.val_tasks = load_tasks(cfg.data.val)[: cfg.trainer.val_tasks] if cfg.trainer.val_every else []
        self.sampler = MixtureSampler(
            self.train_tasks, batch_size=cfg.data.batch_size, ratio=mix, seed=cfg.trainer.seed
        )

    def _open_run(self, checkpoint: Path | None, observer: RolloutObserver | None) -> None:
        """Restore ``checkpoint`` (or write run.json and config.yaml), then start the engine and the log."""
        cfg = self.config
        self.start_step = 0
        if checkpoint is not None:
            self.start_step = self._load_loop_state(self.backend.restore(checkpoint), checkpoint)
            run_info = self.run.run_info()
        else:
            run_info = new_run_info(
                seed=cfg.trainer.seed, backend=self.backend.name, backend_info=self.backend.run_info(),
                isolation=self.isolation.describe(),
            )  # fmt: skip
            self.run.start(run_info, cfg.to_dict())
        self.run_id = run_info["run_id"]
        self.coach = None
        self._stage_context = None  # the reward stages' context, built at the first step
        if cfg.coach.backend is not None:
            self.coach = Coach(cfg.coach)
        designer, executor = self.backend.policies(self.start_step)
        self.engine = RolloutEngine(
            designer=designer,
            executor=executor,
            config=cfg.rollout,
            reward_config=cfg.reward_config(),
            run_id=self.run_id,
            record_config=cfg.to_dict(),
            observer=observer or RolloutObserver(),
            turn_scorer=self.coach.score_execution if self.coach is not None else None,
            controls=cfg.algo.designer_baseline == "control",  # the budget-matched single-agent controls
        )
        self.logger = MetricsLogger(
            self.run_dir,
            loggers=cfg.trainer.active_loggers(),
            resume_step=self.start_step - 1 if checkpoint is not None else None,
            run_id=self.run_id,
            project=cfg.trainer.tracker_project,
            config=None if checkpoint is not None else {**cfg.to_dict(), "run": run_info},
        )

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

    def save(self, next_step: int) -> Path:
        """Checkpoint ``next_step``: the backend's models and optimizers, and the loop's state beside them."""
        return self.backend.save(
            self.run_dir,
            next_step,
            state=self._loop_state(next_step),
            designer_prompt=self.engine.designer_prompt,
            domain_hint=self.engine.domain_hint,
        )

    # ---- the loop ------------------------------------------------------------------------------------------

    def _dynamic_sampling(self, trees: list[RolloutTree], step: int, active: frozenset[str]):
        """DAPO's dynamic sampling per role (:mod:`metaagent.train.dynamic_sampling`): the kept trees and
        ``rollout/dynamic_sampling/*``. Extra draws come from the same sampler (its checkpointed state
        advances) with a seed per round, so a resumed run draws the same tasks."""
        from metaagent.train.dynamic_sampling import group_targets, sample_informative

        cfg = self.config

        def draw(round_: int, n: int) -> list[RolloutTree]:
            tasks = self.sampler.next_batch()[:n]  # in data/drawn/* (the whole batch left the sampler)
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
        """The reward stages the config turns on (:mod:`metaagent.train.reward_stages`), in their order."""
        if self._stage_context is None:
            self._stage_context = StageContext(self.config, self.engine, self.credit_options, self.coach)
        return run_stages(self._stage_context, trees)

    def _adaptive_metrics(self, trees: list[RolloutTree]) -> dict[str, float]:
        """``rollout/adaptive/*`` (:mod:`metaagent.rollout.adaptive`) when ``rollout.adaptive_budget`` is on."""
        from metaagent.rollout.adaptive import adaptive_metrics

        r = self.config.rollout
        if not r.adaptive_budget.enabled:
            return {}
        return adaptive_metrics(trees, r.n_executions, r.adaptive_budget.first_n)

    def train_step(self, step: int) -> StepResult:
        """One step; each line is one stage below, in this order::

            active  = schedule.active_roles(t)                  Eq. 9: executor stage first, K steps each
            tasks   = sampler.next_batch()                      the data mixture's batch
            trees   = rollout(tasks)                            M designs x N executions per task (records);
                                                                algo.dynamic_sampling draws more tasks
            annotate(trees)                                     reward stages: eval-aligned re-runs, coach, turn
                                                                rewards, overlong (train/reward_stages.py)
            credit  = assign_credit(trees, algo.estimator)      Eq. 4-7, advantages written into the trees
            write rollouts/step_t.jsonl
            samples = samples(trees, active, credit)            inactive role: not even built; then the token
                                                                stage (backend's reference / critic pre-pass)
            checks  = backend.check_samples(trees, samples)
            normalize(samples, algo.normalize)                  none | batch | role (Dr. MAS): the step's scale
            backend.update(samples, active, pairs)              Eq. 2-3 PPO-clip per model (the backend's part)
            log the metrics of every stage
        """
        from metaagent.credit import assign_credit
        from metaagent.credit.normalize import normalize_advantages

        cfg = self.config
        t_start = time.perf_counter()
        cuda_peak_mib()  # the step's peaks start here
        if self._stopper is not None:
            self._stopper.step_started(step)
        active = self.schedule.active_roles(step)
        drawn_before = dict(self.sampler.drawn)
        tasks = self.sampler.next_batch()
        trees, sampling_metrics = self._rollout(tasks, step, active)
        t_rollout = time.perf_counter() - t_start
        memory = {"memory/cuda_peak_rollout_mib": cuda_peak_mib()}
        annotation_metrics = self._annotate(trees)
        credit = assign_credit(trees, cfg.algo.estimator, **self.credit_options)
        self.run.write_rollouts(step, trees)
        samples = self._samples(trees, active, credit.turn_advantages)
        checks = self.backend.check_samples(trees, samples, self.credit_options)
        # after the check: the backends' estimator cross-check compares the estimator's own advantages
        normalized = normalize_advantages(samples, cfg.algo.normalize, eps=cfg.algo.eps)
        t_update = time.perf_counter()
        if self._stopper is not None:
            self._stopper.update_started()
        update_metrics, switched = self._update(trees, samples, step, active)
        t_end = time.perf_counter()
        memory["memory/cuda_peak_update_mib"] = cuda_peak_mib()  # credit, samples and the update

        metrics: dict[str, Any] = {
            "schedule/active": active_name(active),
            "schedule/stage": self.schedule.stage(step).index,
            "schedule/switched": float(switched),
            **self.sampler.drawn_metrics(drawn_before),  # data/drawn/<domain>: this step's tasks per domain
            **rollout_metrics(trees),
            **self._adaptive_metrics(trees),
            **sampling_metrics,
            **annotation_metrics,
            **credit.metrics,
            **normalized,
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

    def _rollout(self, tasks: list[Any], step: int, active: frozenset[str]) -> tuple[list[RolloutTree], dict[str, Any]]:
        """The step's trees (a seed per step), with DAPO's dynamic sampling when it is on."""
        trees = self.engine.rollout(tasks, step=step, seed=derive_seed(self.config.trainer.seed, step, "rollout"))
        if not self.config.algo.dynamic_sampling.enabled:
            return trees, {}
        return self._dynamic_sampling(trees, step, active)

    def _samples(self, trees: list[RolloutTree], active: frozenset[str], turn_advantages: Any) -> Any:
        """The active roles' samples: built, overlong-filtered (DAPO), then the token stage's per-token advantages
        after the backend's reference / critic pre-pass over the whole batch (estimators with a token stage)."""
        from metaagent.learn.samples import build_samples, mask_overlong
        from metaagent.train.roles import temperatures
        from metaagent.train.token_stage import apply_token_stage

        cfg = self.config
        samples = build_samples(
            trees,
            active_roles=active,
            temperatures=temperatures(cfg.rollout),
            turn_advantages=turn_advantages,
            max_prompt_len=cfg.optim.max_prompt_tokens,
            max_response_len=cfg.optim.max_response_tokens,
        )
        if cfg.algo.overlong.filter:  # DAPO's overlong filtering: truncated generations out of the loss
            samples = mask_overlong(samples, cfg.algo.overlong.filter_roles)
        if self.token_stage is None:
            return samples
        return apply_token_stage(
            samples, self.token_stage, self.credit_options, ref_logprobs=self.backend.ref_logprobs,
            group_of=self.backend.model_key, values=self.backend.values,
        )  # fmt: skip

    def _update(
        self, trees: list[RolloutTree], samples: Any, step: int, active: frozenset[str]
    ) -> tuple[dict[str, Any], bool]:
        """The backend's update on ``samples`` (and, with ``optim.dpo``, the records' preference pairs), after
        forgetting the optimizer moments at a stage boundary (``optim.stage_switch: reset``); the update's
        metrics and whether this step starts a new stage."""
        from metaagent.learn.samples import build_pair_samples

        cfg = self.config
        switched = step > 0 and self.schedule.stage(step - 1).index != self.schedule.stage(step).index
        if switched and cfg.optim.stage_switch == "reset":
            self.backend.reset_optimizer_moments()
        pairs = build_pair_samples(trees, active_roles=active)
        if pairs and not cfg.optim.dpo:
            samples.metrics["samples/preference_pairs_unused"] = float(len(pairs))  # optim.dpo=true trains on them
            pairs = []
        return self.backend.update(samples, step, active, pairs), switched

    def validate(self, step: int) -> dict[str, Any]:
        """``val_repeats`` samples per task (greedy by default) by :mod:`metaagent.eval`'s ``auto`` method,
        the code behind ``metaagent-eval``; metrics under ``val/`` (the rollout metrics and avg@k/pass@k).
        Under ``policy.continuous`` the tasks are in flight together (``auto_concurrency``: their calls fill
        the running batch; per-task seeds, so the same samples); static batching keeps one task at a time, so
        the batches, and an exact replay, do not depend on timing."""
        from metaagent.eval import AUTO, Method, rollout_tasks, tree_metrics
        from metaagent.eval.config import auto_concurrency

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
            concurrency=auto_concurrency(cfg.policy.max_batch_size, n) if cfg.policy.continuous else 1,
        )
        self.run.write_rollouts(step, trees, prefix="val_")
        metrics = {"val/" + k.split("/", 1)[1]: v for k, v in rollout_metrics(trees).items()}
        metrics.update(tree_metrics(trees, sorted({1, n}), prefix="val/", seed=seed))
        self.logger.log(step, metrics)
        return metrics

    def train(self, on_step: Callable[[StepResult], None] | None = None) -> list[StepResult]:
        """Run from ``start_step`` to ``trainer.steps``; checkpoint every ``save_every`` steps and at the end.

        SIGINT / SIGTERM stop the run cleanly (:class:`_Stopper`): a checkpoint of the steps done is written
        and :class:`TrainInterrupted` is raised; ``--resume`` continues bit for bit."""
        cfg = self.config.trainer
        results: list[StepResult] = []
        last_saved = None
        try:
            with _Stopper(self) as self._stopper:
                for step in range(self.start_step, cfg.steps):
                    result = self.train_step(step)
                    if cfg.val_every and (step + 1) % cfg.val_every == 0 and self.val_tasks:
                        result.metrics.update(self.validate(step))
                    results.append(result)
                    if on_step is not None:
                        on_step(result)
                    if (cfg.save_every and (step + 1) % cfg.save_every == 0) or self._stopper.signum:
                        path = self.save(step + 1)
                        last_saved = step + 1
                    if self._stopper.signum and step + 1 < cfg.steps:  # (after the last step the run is done)
                        raise TrainInterrupted(self._stopper.signum, step + 1, path)
                if cfg.steps > self.start_step and last_saved != cfg.steps:
                    self.save(cfg.steps)
        finally:
            self._stopper = None
            self.logger.close()
        return results

    def close(self) -> None:
        """Close the engine, the coach and the backend (also after a set-up that failed half way)."""
        for part in ("engine", "coach", "backend"):
            obj = getattr(self, part, None)
            if obj is not None:
                obj.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def batch_mix(cfg: TrainConfig, tasks: list[Any]) -> dict[str, float]:
    """Each loaded domain's weight in a batch (``data.mix``, :func:`metaagent.data.mixture.batch_shares`); a
    loaded domain the mix gives no weight is a :class:`TrainError` naming it, before anything runs."""
    counts = Counter(t.domain for t in tasks)
    try:
        return batch_shares(cfg.data.batch_mix(counts), counts)
    except DataError as e:
        raise TrainError(str(e)) from None


def _isolation_for_training(cfg: TrainConfig, tasks: list[Any]) -> Any:
    """The isolation layer of this run's model-written code (``execution.isolation``); training on code
    tasks refuses to start without one unless the config accepts that with ``execution.isolation=none``."""
    code = any(get_domain(name).runs_code for name in {t.domain for t in tasks})  # every loaded one is drawn
    try:
        return for_config(cfg.execution, purpose="train", code_tasks=code)
    except IsolationError as e:
        raise TrainError(str(e)) from None
