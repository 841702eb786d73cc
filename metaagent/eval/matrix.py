"""The structure matrix (issue #42): task families x methods, each family's oracle method, and what choosing
the structure per family is worth against the best single method on the mixture.

Input everywhere: per-task scores (:class:`~metaagent.eval.scoring.TaskScore`) keyed by ``(family, method)``,
read at one metric and budget (``avg@k`` by default). All functions are pure.

- :func:`cell` a family x method cell: mean over tasks and its bootstrap 95% CI, and the compute per sample
  (:func:`compute`: executor calls, designer calls, generated tokens);
- :func:`oracle` a family's best method among the candidates (``sa`` and the fixed templates; ``auto`` is
  what is being judged, never a candidate), chosen on the same tasks it is scored on (in-sample);
- :func:`cross_fitted_oracle` the same choice made on one half of a family's tasks and scored on the other
  half (and vice versa), which removes the optimism of picking a maximum on the data it is scored on;
- :func:`mixture` every method's mean over the families with equal weight (the suite's families have the same
  number of test tasks), the oracle's (each family's best), the best single method, and the paired
  difference oracle - best single with a bootstrap CI over the pooled tasks. A method not run on a family
  (a template of the other domain, whose final answer is the other domain's format) scores 0 there;
- :func:`pattern_share` the share of a method's valid designs per family whose pattern is a given one (the
  designer's share of the oracle structure).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import Any

from metaagent.records import RolloutTree

from .metrics import DEFAULT_BOOTSTRAP, bootstrap_ci, paired_bootstrap_ci
from .methods import AUTO, SA
from .scoring import TaskScore

Scores = Mapping[tuple[str, str], Sequence[TaskScore]]  # (family, method) -> per-task scores


def values(scores: Sequence[TaskScore], metric: str = "avg", k: int = 1) -> dict[str, float]:
    """task id -> the task's ``metric@k`` (tasks without it, e.g. too few scored samples, are left out)."""
    attr = "pass_" if metric == "pass" else metric
    out = {}
    for s in scores:
        v = getattr(s, attr).get(k)
        if v is not None:
            out[s.task_id] = float(v)
    return out


def compute(scores: Sequence[TaskScore]) -> dict[str, float | None]:
    """A method's compute per sample over the tasks of ``scores``: executor calls (agent turns), designer
    calls
    and generated tokens, each ``Σ over tasks / Σ samples`` (None without samples)."""
    samples = sum(s.samples for s in scores)
    if not samples:
        return {"executor_calls": None, "designer_calls": None, "tokens": None}
    return {
        "executor_calls": sum(s.agent_calls for s in scores) / samples,
        "designer_calls": sum(s.sampled_designs for s in scores) / samples,
        "tokens": sum(s.tokens for s in scores) / samples,
    }


def cell(scores: Sequence[TaskScore], *, metric: str = "avg", k: int = 1, n_boot: int = DEFAULT_BOOTSTRAP) -> dict[str, Any]:
    """Mean of ``metric@k`` over the tasks of one family x method cell, with its bootstrap 95% CI and the
    compute per sample (:func:`compute`)."""
    v = list(values(scores, metric, k).values())
    if not v:
        return {"tasks": 0, "mean": None, "ci95": None, "compute": compute(scores)}
    low, high = bootstrap_ci(v, n_boot=n_boot)
    return {"tasks": len(v), "mean": fmean(v), "ci95": [low, high], "compute": compute(scores)}


def _candidates(scores: Scores, family: str, exclude: Sequence[str]) -> list[str]:
    """The family's candidate methods, ``sa`` first (a tie goes to the single agent), then by name."""
    return sorted((m for f, m in scores if f == family and m not in exclude), key=lambda m: (m != SA, m))


def oracle(scores: Scores, family: str, *, metric: str = "avg", k: int = 1, exclude: Sequence[str] = (AUTO,)) -> str:
    """The method with the highest mean ``metric@k`` on ``family`` (ties: ``sa``, else the first by name)."""
    candidates = _candidates(scores, family, exclude)
    if not candidates:
        raise ValueError(f"no candidate method was scored on family {family!r}")
    means = {m: fmean(values(scores[family, m], metric, k).values() or [0.0]) for m in candidates}
    return max(candidates, key=lambda m: (means[m], -candidates.index(m)))


def cross_fitted_oracle(
    scores: Scores, family: str, *, metric: str = "avg", k: int = 1, exclude: Sequence[str] = (AUTO,)
) -> dict[str, float]:
    """Per task of ``family``: the score of the method that is best on the *other* half of the family's tasks
    (halves: even and odd positions in sorted task-id order, over the tasks every candidate scored)."""
    methods = _candidates(scores, family, exclude)
    table = {m: values(scores[family, m], metric, k) for m in methods}
    tasks = sorted(set.intersection(*(set(v) for v in table.values()))) if table else []
    halves = (tasks[0::2], tasks[1::2])
    out: dict[str, float] = {}
    for choose, score in (halves, halves[::-1]):
        if not choose:
            continue
        best = max(methods, key=lambda m: (fmean(table[m][t] for t in choose), -methods.index(m)))
        out.update({t: table[best][t] for t in score})
    return out


def mixture(
    scores: Scores,
    families: Sequence[str],
    methods: Sequence[str],
    *,
    metric: str = "avg",
    k: int = 1,
    n_boot: int = DEFAULT_BOOTSTRAP,
    exclude: Sequence[str] = (AUTO,),
) -> dict[str, Any]:
    """Each method's mean over ``families`` (0 where it was not run), the per-family oracle's, the best single
    method's, and oracle - best single (in-sample and cross-fitted) with paired bootstrap CIs over tasks."""
    tasks = {f: sorted(set.union(*(set(values(scores.get((f, m), ()), metric, k)) for m in methods))) for f in families}

    def per_task(method: str) -> dict[str, float]:
        out = {}
        for f in families:
            v = values(scores.get((f, method), ()), metric, k)
            out.update({t: v.get(t, 0.0) for t in tasks[f]})
        return out

    def family_mean(v: Mapping[str, float]) -> float:
        return fmean(fmean(v[t] for t in tasks[f]) for f in families if tasks[f])

    by_method = {m: per_task(m) for m in methods}
    oracles = {f: oracle(scores, f, metric=metric, k=k, exclude=exclude) for f in families}
    oracle_v = {t: by_method[oracles[f]][t] for f in families for t in tasks[f]}
    crossed = {}
    for f in families:
        crossed.update(cross_fitted_oracle(scores, f, metric=metric, k=k, exclude=exclude))
    singles = [m for m in methods if m not in exclude]
    best = max(singles, key=lambda m: (family_mean(by_method[m]), -singles.index(m)))
    order = [t for f in families for t in tasks[f]]

    def paired(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, Any]:
        common = [t for t in order if t in a and t in b]
        diff, low, high = paired_bootstrap_ci([a[t] for t in common], [b[t] for t in common], n_boot=n_boot)
        return {"tasks": len(common), "diff": diff, "ci95": [low, high]}

    return {
        "metric": f"{metric}@{k}",
        "methods": {m: family_mean(by_method[m]) for m in methods},
        "oracles": oracles,
        "oracle": family_mean(oracle_v),
        "best_single": best,
        "oracle_minus_best_single": paired(by_method[best], oracle_v),
        "cross_fitted_oracle": fmean(crossed.values()) if crossed else None,
        "cross_fitted_minus_best_single": paired(by_method[best], crossed) if crossed else None,
    }


def pattern_share(trees: Sequence[RolloutTree], pattern: str) -> dict[str, Any]:
    """Among the valid designs of ``trees``: how many there are, and the share whose pattern is ``pattern``."""
    designs = [d for t in trees for d in t.designs if d.valid]
    hits = sum(1 for d in designs if (d.structure or {}).get("pattern") == pattern)
    total = sum(len(t.designs) for t in trees)
    return {
        "designs": total,
        "valid": len(designs),
        "valid_share": len(designs) / total if total else None,
        "pattern": pattern,
        "share": hits / len(designs) if designs else None,
    }
