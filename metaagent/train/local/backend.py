"""Stagewise hierarchical GRPO (paper §3) on the local backend: one process, CPU or one GPU.

The loop (schedule, rollout, credit, samples, run directory) is :class:`metaagent.train.loop.TrainLoop`;
this backend owns the models: each physical model is a transformers model that serves the rollout through
an ``HFPolicy`` behind a ``BatchingPolicy`` and is trained in place by its own ``PolicyUpdater``::

    update_routed(updaters, samples, ...)                   Eq. 2-3 PPO-clip, one optimizer step per model

so the next rollout reads the updated weights without any sync step.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metaagent.records import RolloutTree
from metaagent.rollout.prompts import write_designer_prompt
from metaagent.train.backend import Backend, Capabilities, Needs, Policies
from metaagent.train.config import TrainConfig


class LocalBackend(Backend):
    """The local backend (:class:`metaagent.train.backend.Backend`): rollout and update on the same
    in-memory models (CPU or one GPU). Nothing loads before :meth:`start`. Its samples are its own batch, so
    ``check_samples`` has nothing to cross-check (the base class's default).

    Args:
        config: the resolved run configuration.
    """

    name = "local"
    capabilities = Capabilities(
        token_advantages=True, critic=True, ref_logprobs=True, reset_moments=True, preference_pairs=True
    )

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.models: Any = None
        self.updaters: dict[str, Any] = {}
        self.critics: dict[str, Any] = {}

    def start(self, needs: Needs) -> None:
        from metaagent.train.local.models import load_models, make_critics, make_updaters

        cfg = self.config
        self.models = load_models(cfg.policy, seed=cfg.trainer.seed)
        self.updaters = make_updaters(
            self.models, cfg.optim, total_steps=cfg.trainer.steps, need_ref=needs.ref_logprobs
        )
        # GAE (unity mode: gae): one value model per physical model, as the authors' critic per LLM
        self.critics = make_critics(self.models, cfg.critic, cfg.optim) if needs.values else {}

    def run_info(self) -> dict[str, Any]:
        return {"models": self.models.model_ids()}

    def policies(self, step: int) -> Policies:
        return Policies(self.models.designer, self.models.executor())  # trained in place: nothing to sync

    # ---- checkpoints ---------------------------------------------------------------------------------------

    def restore(self, path: Path) -> dict[str, Any]:
        from metaagent.learn.checkpoint import load_checkpoint, model_path

        adapters = self.models.adapters  # LoRA keys: their folders hold adapters, loaded into the shared bases
        full = {k: m for k, m in self.models.models.items() if k not in adapters}
        state = load_checkpoint(path, models=full, optimizers=self.updaters, critics=self.critics)
        for key, aset in adapters.items():
            aset.load(key, model_path(path, key))
        self.models.weights_changed()
        return state

    def save(
        self, run_dir: Path, next_step: int, *, state: dict[str, Any], designer_prompt: str, domain_hint: bool = True
    ) -> Path:
        from metaagent.learn.checkpoint import model_path, save_checkpoint

        path = save_checkpoint(
            run_dir,
            next_step,
            models=self.models.checkpoint_models(),
            tokenizers=self.models.tokenizers,
            optimizers=self.updaters,
            state=state,
            critics=self.critics,
        )
        for key in self.models.models:  # a checkpoint keeps the designer prompt its designer was trained with
            write_designer_prompt(model_path(path, key), designer_prompt, domain_hint)
        return path

    # ---- the backend's part of a step ----------------------------------------------------------------------

    def ref_logprobs(self, samples: Sequence[Any]) -> list[list[float]]:
        from metaagent.train.local.update import ref_logprobs_routed

        return ref_logprobs_routed(self.updaters, samples, self.models.role_to_key)

    def values(self, samples: Sequence[Any]) -> list[list[float]]:
        from metaagent.train.local.models import critic_values

        return critic_values(self.critics, samples, self.models.role_to_key)

    def model_key(self, sample: Any) -> str:
        from metaagent.learn.samples import model_key

        return model_key(sample, self.models.role_to_key)

    def reset_optimizer_moments(self) -> None:
        for updater in self.updaters.values():
            updater.reset_moments()

    def update(self, samples: Any, step: int, active: frozenset[str], pairs: Sequence[Any]) -> dict[str, Any]:
        from metaagent.train.local.models import release_freed_memory, update_heap

        self.models.free_memory()  # the update's activations get the rollout's caches and copies
        with update_heap():
            metrics = self._update_in_heap(samples, step, active, pairs)
        self.models.weights_changed()  # the prefix caches hold keys/values of the old weights
        release_freed_memory()  # the activations' pages, before the rollout's threads allocate theirs
        return metrics

    def _update_in_heap(self, samples: Any, step: int, active: frozenset[str], pairs: Sequence[Any]) -> dict[str, Any]:
        from metaagent.train.local.models import update_critics
        from metaagent.train.local.update import update_routed

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
        if self.models is not None:
            self.models.close()
