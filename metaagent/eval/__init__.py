"""The evaluation harness behind the paper's tables (§4.1, §4.4, App. C): ``metaagent-eval``.

    from metaagent.eval import EvalConfig, evaluate
    results = evaluate(EvalConfig(methods=["sa", "fixed:reflection", "auto"], benchmarks=["bundled:test"],
                                  models=["embedded", "embedded-sft"], n=3, out="eval_results"))

Methods (:mod:`.methods`): ``sa``, ``fixed:<template>``, ``auto``, and the equal-compute baselines ``sa@k`` /
``sa@auto`` and ``best-per-domain``. Metrics (:mod:`.metrics`): avg@k, unbiased pass@k, maj@k, bootstrap CIs,
the t interval over training seeds. Scoring of trees (:mod:`.scoring`), analyses (:mod:`.analysis`),
the run and its results directory (:mod:`.runner`), table and HTML report (:mod:`.report`). Training's
validation uses :func:`rollout_tasks` and :func:`tree_metrics`, so ``val/`` numbers are these numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

from metaagent.records import RolloutTree

from .analysis import across_seeds, design_stats, paired_comparison
from .config import EvalConfig, make_config
from .errors import EvalError
from .methods import AUTO, SA, Method, method_names, parse_method, rollout_task, rollout_tasks
from .metrics import avg_at_k, bootstrap_ci, maj_at_k, paired_bootstrap_ci, pass_at_k, seed_interval
from .runner import EvalObserver, Evaluation, evaluate
from .scoring import TaskScore, check_budgets, flat_metrics, samples_of, score_task, summarize


def tree_metrics(trees: Sequence[RolloutTree], ks: Sequence[int], prefix: str = "eval/", **kwargs) -> dict[str, float]:
    """Flat ``prefix``-namespaced metrics (avg@k, pass@k, maj@k with CIs, budgets) of evaluation trees."""
    return flat_metrics(summarize([score_task(t, ks) for t in trees], ks, **kwargs), prefix)


__all__ = [
    "AUTO",
    "SA",
    "EvalConfig",
    "EvalError",
    "EvalObserver",
    "Evaluation",
    "Method",
    "TaskScore",
    "across_seeds",
    "avg_at_k",
    "bootstrap_ci",
    "check_budgets",
    "design_stats",
    "evaluate",
    "flat_metrics",
    "maj_at_k",
    "make_config",
    "method_names",
    "paired_bootstrap_ci",
    "paired_comparison",
    "parse_method",
    "pass_at_k",
    "rollout_task",
    "rollout_tasks",
    "samples_of",
    "score_task",
    "seed_interval",
    "summarize",
    "tree_metrics",
]
