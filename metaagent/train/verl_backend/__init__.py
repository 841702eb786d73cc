"""GPU scale: the same stagewise hierarchical GRPO on upstream verl (FSDP actors, vLLM servers, Ray).

``train-metaagent --backend verl`` (:mod:`metaagent.cli.train`) prints :func:`plan_text` and runs
:class:`metaagent.train.loop.TrainLoop` over :class:`.backend.VerlBackend`. What runs where:

- metaagent: data, the rollout engine (designer + sandboxed multi-agent executions), rewards, records,
  credit (paper Eq. 4-7), the stage schedule (Eq. 9) and samples of the active role — unchanged;
- verl 0.9.x: per physical model an FSDP actor worker group, vLLM async servers (the engine's designer and
  agent calls reach them through :class:`.policy.ServerPolicy`), ``update_actor`` with verl's PPO loss, and
  weight sync to the servers after each update;
- in between, pure CPU code: :mod:`.batch` (samples -> ``DataProto``) and :mod:`.advantage` (metaagent's
  credit in verl's estimator registry).

The ``verl:`` config section is :class:`metaagent.train.backend_sections.VerlConfig` (below the run's config
and this backend). Modules: :mod:`.plan` (what runs where, ``--dry-run``),
:mod:`.verl_config` (verl's own config per model), :mod:`.batch`, :mod:`.advantage`, :mod:`.policy`,
:mod:`.workers` (worker groups), :mod:`.backend` (the backend), :mod:`.checkpoint`, :mod:`.convert` (to Hugging Face),
:mod:`.device` / :mod:`.cpu` / :mod:`.verl_plugin` (``verl.device``: the settings, the CPU rollout and pool, the
plugin verl loads in every process: CPU platform, trl guard).
Nothing GPU-related is imported until a real run starts; ``--dry-run`` imports neither torch nor verl.
"""

from __future__ import annotations

from typing import Any

from metaagent.train.backend_sections import ModelResources, VerlConfig

from .errors import VerlBackendError

__all__ = ["ModelResources", "VerlBackendError", "VerlConfig", "plan_text"]


def plan_text(config: Any) -> tuple[Any, str]:
    """``(plan, text)``: the resolved plan and what ``--dry-run`` prints, with verl's composed settings per
    physical model. Raises ``metaagent.config.ConfigError`` naming the fix for a configuration that cannot run.
    """
    from .plan import format_plan, resolve_plan
    from .verl_config import compose_verl_config, shown_settings

    plan = resolve_plan(config)
    settings = {m.key: shown_settings(compose_verl_config(config, plan, m)) for m in plan.models}
    return plan, format_plan(plan, settings)
