"""Build the environment of a ``plan`` task from its spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import planpath, sokoban, sudoku  # noqa: F401  the built-in environments register themselves
from .base import ENVS, EnvError, PlanEnv, env_names


def make_env(spec: Mapping[str, Any]) -> PlanEnv:
    """The environment of a ``plan`` task from ``task.metadata["env"]`` (a name registered in :data:`ENVS`)."""
    if not isinstance(spec, Mapping) or spec.get("name") not in ENVS:
        raise EnvError(f"task metadata 'env' must be a dict with name one of {env_names()}, got {spec!r}")
    return ENVS.get(spec["name"])(spec)
