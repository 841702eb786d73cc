"""Evaluation-aligned credit (seed 002, "Who gets the reward, who gets the blame"): pure parts.

- :mod:`.shapley`: coalition plans, exact / permutation Shapley, contribution rewards, helpfulness split;
- :mod:`.bisect`: first-error localisation by bisection with a prefix judge;
- :mod:`.episode`: one execution's credit from its records;
- :mod:`.estimator`: the registered ``eval_aligned`` estimator;
- :mod:`.metrics`: the paper's evaluation protocol as metrics.

The expensive work (coalition re-runs, judges, resampling) is :mod:`metaagent.rollout.eval_aligned`.
"""

from .bisect import ERR, OK, Bisection, first_error, first_error_labels, max_queries
from .episode import (
    COALITION_BASELINES,
    HELPFUL,
    HELPFUL_ERROR,
    EpisodeCredit,
    call_order,
    episode_credit,
    evaluator_score,
    plan_for,
    players,
)
from .estimator import PG_BASELINES, eval_aligned_estimator
from .metrics import protocol_metrics
from .shapley import (
    ShapleyPlan,
    contribution_rewards,
    exact_shapley,
    helpfulness_weights,
    permutation_shapley,
    sample_permutations,
    shapley_plan,
    shapley_values,
)

__all__ = [
    "COALITION_BASELINES",
    "ERR",
    "HELPFUL",
    "HELPFUL_ERROR",
    "OK",
    "PG_BASELINES",
    "Bisection",
    "EpisodeCredit",
    "ShapleyPlan",
    "call_order",
    "contribution_rewards",
    "episode_credit",
    "eval_aligned_estimator",
    "evaluator_score",
    "exact_shapley",
    "first_error",
    "first_error_labels",
    "helpfulness_weights",
    "max_queries",
    "permutation_shapley",
    "plan_for",
    "players",
    "protocol_metrics",
    "sample_permutations",
    "shapley_plan",
    "shapley_values",
]
