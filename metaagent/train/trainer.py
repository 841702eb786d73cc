"""Stagewise hierarchical GRPO (paper §3) on the local backend: one process, CPU or one GPU.

The loop (schedule, rollout, credit, samples, run directory) is :class:`metaagent.train.loop.TrainLoop`;
this backend adds the models: each physical model is a transformers model that serves the rollout through
an ``HFPolicy`` behind a ``BatchingPolicy`` and is trained in place by its own ``PolicyUpdater``::

    update_routed(updaters, samples, ...)                   Eq. 2-3 PPO-clip, one optimizer step per model

so the next rollout reads the updated weights without any sync step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from metaagent.rollout.engine import RolloutObserver
from metaagent.train.config import TrainConfig
from metaagent.train.loop import StepResult, TrainError, TrainLoop, active_name, config_hash, load_tasks

__all__ = ["StepResult", "TrainError", "Trainer", "active_name", "config_hash", "load_tasks"]


class Trainer(TrainLoop):
    """The local backend: rollout and update on the same in-memory models (CPU or one GPU).

    Args:
        config: the resolved run configuration.
        resume: a checkpoint folder, or True for the newest checkpoint of ``config.trainer.out``.
        observer: rollout progress hooks (the CLI's display).
    """

    backend = "local"
    supports_token_advantages = True
    supports_critic = True

    def __init__(self, config: TrainConfig, *, resume: str | bool | None = None, observer: RolloutObserver | None = None):
        from metaagent.train.models import load_models, make_critics, make_updaters

        self._init_data(config, resume)
        checkpoint = self._find_checkpoint(resume)
        self.models = load_models(config.policy)
        self.updaters = make_updaters(
            self.models, config.optim, total_steps=config.trainer.steps, need_ref=self._token_stage_needs_ref()
        )
        # GAE (unity mode: gae): one value model per physical model, as the authors' critic per LLM
        self.critics = make_critics(self.models, config.critic, config.optim) if self._token_stage_needs_values() else {}
        self._open_run(checkpoint, designer=self.models.designer, executor=self.models.executor(), observer=observer)

    def _model_ids(self) -> dict[str, str]:
        return self.models.model_ids()

    def _restore(self, path: Path) -> int:
        from metaagent.learn.checkpoint import load_checkpoint, model_path

        adapters = self.models.adapters  # LoRA keys: their folders hold adapters, loaded into the shared bases
        full = {k: m for k, m in self.models.models.items() if k not in adapters}
        state = load_checkpoint(path, models=full, optimizers=self.updaters, critics=self.critics)
        for key, aset in adapters.items():
            aset.load(key, model_path(path, key))
        self.models.weights_changed()
        return self._load_loop_state(state, path)

    def save(self, next_step: int) -> Path:
        from metaagent.learn.checkpoint import model_path, save_checkpoint
        from metaagent.rollout.prompts import write_designer_prompt

        path = save_checkpoint(
            self.run_dir,
            next_step,
            models=self.models.checkpoint_models(),
            tokenizers=self.models.tokenizers,
            optimizers=self.updaters,
            state=self._loop_state(next_step),
            critics=self.critics,
        )
        for key in self.models.models:  # a checkpoint keeps the designer prompt its designer was trained with
            write_designer_prompt(model_path(path, key), self.engine.designer_prompt)
        return path

    def _reset_optimizer_moments(self) -> None:
        for updater in self.updaters.values():
            updater.reset_moments()

    def _ref_logprobs(self, samples: Any) -> list[list[float]]:
        from metaagent.train.update import ref_logprobs_routed

        return ref_logprobs_routed(self.updaters, samples, self.models.role_to_key)

    def _model_key(self, sample: Any) -> str:
        from metaagent.learn.samples import model_key

        return model_key(sample, self.models.role_to_key)

    def _values(self, samples: Any) -> list[list[float]]:
        from metaagent.train.models import critic_values

        return critic_values(self.critics, samples, self.models.role_to_key)

    def _update(self, samples: Any, step: int, active: frozenset[str], pairs: Any = ()) -> dict[str, Any]:
        from metaagent.train.models import release_freed_memory, update_heap

        self.models.free_memory()  # the update's activations get the rollout's caches and copies
        with update_heap():
            metrics = self._update_in_heap(samples, step, active, pairs)
        self.models.weights_changed()  # the prefix caches hold keys/values of the old weights
        release_freed_memory()  # the activations' pages, before the rollout's threads allocate theirs
        return metrics

    def _update_in_heap(self, samples: Any, step: int, active: frozenset[str], pairs: Any) -> dict[str, Any]:
        from metaagent.train.models import update_critics
        from metaagent.train.update import update_routed

        metrics: dict[str, Any] = {}
        if self.critics:
            metrics.update(update_critics(self.critics, samples, self.models.role_to_key))
        if step < self.config.critic.warmup_steps and self.critics:  # verl's critic_warmup: no actor update yet
            metrics["train/critic_warmup"] = 1.0
            return metrics
        metrics.update(update_routed(
            self.updaters, samples, self.models.role_to_key, active_roles=active, pairs=pairs,
            dpo_beta=self.config.optim.dpo_beta,
        ))  # fmt: skip
        return metrics

    def close(self) -> None:
        super().close()
        self.models.close()
