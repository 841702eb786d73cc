"""Evaluation-aligned credit's post-rollout stage (seed 002): coalition re-runs, judges, bisection, pairs."""

from .config import EvalAlignedConfig
from .stage import COUNTERS, Budget, EvalAlignedStage

__all__ = ["COUNTERS", "Budget", "EvalAlignedConfig", "EvalAlignedStage"]
