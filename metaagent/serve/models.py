"""The physical models behind the server: one :class:`BatchingPolicy` per distinct model, shared by every
request, so concurrent teams meet in the same batches.

The designer and the executor share one model unless ``--designer-model`` / ``--executor-model`` name
different ones. In fixed-designer mode no designer model is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from metaagent.policy.base import Policy
from metaagent.policy.factory import build_policy

from .config import ServeConfig


@dataclass
class ServeModels:
    """The policies requests use. ``physical`` maps each distinct model name to its batcher."""

    designer: Policy | None
    executor: Policy
    physical: dict[str, Policy] = field(default_factory=dict)

    def close(self) -> None:
        for policy in self.physical.values():
            policy.close()

    def describe(self) -> dict[str, Any]:
        return {
            "designer": self.designer.model_id if self.designer is not None else None,
            "executor": self.executor.model_id,
        }


def _options(config: ServeConfig) -> dict[str, Any]:
    """The backend's options for ``config.backend``, and the batcher's in front of it."""
    if config.backend == "hf":
        options: dict[str, Any] = {
            "device": config.device,
            "dtype": config.dtype,
            "max_batch_size": config.max_batch_size,
            "continuous": config.continuous,
        }
    elif config.backend == "openai":
        options = {"base_url": config.base_url, "max_concurrency": max(config.backend_in_flight, 1)}
    else:  # vllm schedules its own batches; the engine's arguments keep their defaults
        options = {}
    return {
        **options, "batching": True, "batch_size": config.max_batch_size, "max_wait_s": config.max_wait_ms / 1000.0,
        "max_in_flight": config.backend_in_flight,
    }  # fmt: skip


def load_models(config: ServeConfig) -> ServeModels:
    """Load every distinct model of ``config`` and put a batcher in front of each (slow: weights load)."""
    names = {"executor": config.executor_name}
    if config.designer_name is not None:
        names["designer"] = config.designer_name
    physical: dict[str, Policy] = {}
    try:
        for name in dict.fromkeys(names.values()):
            physical[name] = build_policy(config.backend, name, **_options(config))
    except BaseException:
        for policy in physical.values():
            policy.close()
        raise
    designer = physical[names["designer"]] if "designer" in names else None
    return ServeModels(designer=designer, executor=physical[names["executor"]], physical=physical)
