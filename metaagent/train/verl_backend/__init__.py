"""GPU scale: the same stagewise hierarchical GRPO on upstream verl (FSDP actors, vLLM servers, Ray).

``train-metaagent --backend verl`` calls :func:`run`. What runs where:

- metaagent: data, the rollout engine (designer + sandboxed multi-agent executions), rewards, records,
  credit (paper Eq. 4-7), the stage schedule (Eq. 9) and samples of the active role — unchanged;
- verl 0.9.x: per physical model an FSDP actor worker group, vLLM async servers (the engine's designer and
  agent calls reach them through :class:`.policy.ServerPolicy`), ``update_actor`` with verl's PPO loss, and
  weight sync to the servers after each update;
- in between, pure CPU code: :mod:`.batch` (samples -> ``DataProto``) and :mod:`.advantage` (metaagent's
  credit in verl's estimator registry).

Modules: :mod:`.config` (the ``verl:`` section), :mod:`.plan` (what runs where, ``--dry-run``),
:mod:`.verl_config` (verl's own config per model), :mod:`.batch`, :mod:`.advantage`, :mod:`.policy`,
:mod:`.workers` (GPU), :mod:`.trainer` (the loop), :mod:`.checkpoint`, :mod:`.convert` (to Hugging Face).
Nothing GPU-related is imported until a real run starts; ``--dry-run`` imports neither torch nor verl.
"""

from __future__ import annotations

import sys
from typing import Any

from .config import ModelResources, VerlConfig
from .errors import VerlBackendError

__all__ = ["ModelResources", "VerlBackendError", "VerlConfig", "plan_text", "run"]


def plan_text(config: Any) -> tuple[Any, str]:
    """``(plan, text)``: the resolved plan and what ``--dry-run`` prints, with verl's composed settings per
    physical model. Raises ``metaagent.config.ConfigError`` naming the fix for a configuration that cannot run.
    """
    from .plan import format_plan, resolve_plan
    from .verl_config import compose_verl_config, shown_settings

    plan = resolve_plan(config)
    settings = {m.key: shown_settings(compose_verl_config(config, plan, m)) for m in plan.models}
    return plan, format_plan(plan, settings)


def run(config: Any, *, dry_run: bool = False, resume: str | bool | None = None) -> int:
    """Train with the verl backend (or only print the plan); returns the process exit code.

    Exit codes: 0 done, 1 the run failed, 2 the configuration cannot run (message on stderr).
    """
    from metaagent.config import ConfigError

    try:
        plan, text = plan_text(config)
    except ConfigError as e:
        print(f"train-metaagent: config error: {e}", file=sys.stderr)
        return 2
    print(text, flush=True)
    if dry_run:
        return 0

    from metaagent.cli.display import TrainDisplay
    from metaagent.train.checkpoint import CheckpointError
    from metaagent.train.trainer import TrainError

    from .trainer import VerlTrainer, require_gpus

    display = TrainDisplay(show_samples=config.trainer.show_samples)
    try:
        require_gpus(plan)
        trainer = VerlTrainer(config, plan=plan, resume=resume, observer=display)
    except (VerlBackendError, TrainError, ConfigError, CheckpointError, FileNotFoundError) as e:
        print(f"train-metaagent: {e}", file=sys.stderr)
        return 2
    try:
        with trainer:
            display.header(config, trainer.start_step, str(trainer.run_dir))
            trainer.train(on_step=lambda r: display.step_done(r.step, r.metrics, r.trees))
    except (VerlBackendError, TrainError, CheckpointError) as e:
        print(f"train-metaagent: {e}", file=sys.stderr)
        return 1
    display.console.print(
        f"done: metrics in {trainer.run_dir / 'metrics.jsonl'}, rollouts in {trainer.run_dir / 'rollouts'}, "
        f"checkpoints in {trainer.run_dir / 'checkpoints'} (to Hugging Face: python -m "
        "metaagent.train.verl_backend.convert <checkpoint> <out>)"
    )
    return 0
