"""Build the environment of a ``plan`` task from its spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import ENV_NAMES, EnvError, PlanEnv
from .planpath import PlanPath
from .sokoban import Sokoban
from .sudoku import Sudoku

_ENVS: dict[str, type[PlanEnv]] = {"planpath": PlanPath, "sudoku": Sudoku, "sokoban": Sokoban}


def make_env(spec: Mapping[str, Any]) -> PlanEnv:
    """The environment of a ``plan`` task from ``task.metadata["env"]``."""
    if not isinstance(spec, Mapping) or spec.get("name") not in ENV_NAMES:
        raise EnvError(f"task metadata 'env' must be a dict with name one of {ENV_NAMES}, got {spec!r}")
    return _ENVS[spec["name"]](spec)
