"""The seed paper's evaluation protocol (§5) as ``credit/eval_aligned/...`` metrics, read from the records:

- ``alpha/<agent>``: mean contribution share alpha_i of each agent over the step's success episodes (compare
  steps for "before/after training");
- ``loo_gap``: mean ``|(v(A) - v(A \\ {i})) - phi_i|`` (leave-one-agent-out vs Shapley; 0 for n = 1 and for
  additive games), over agents whose ``v(A \\ {i})`` was run;
- ``helpful_fraction``: share of labelled success-episode turns with ``helpful >= 0.5`` (judge labels, Eq. 5);
- ``failure_helpful_fraction``: the same over the failure episodes' Eq. 9 labels (1 before the first error,
  0 at it), with ``failure_labelled_steps``;
- ``localisation_queries`` / ``localisation_runs``: mean judge queries and prefix re-runs (``forced:<t>``; the
  N-best checks are ``resample:<t>``) per located first error;
- ``correction_efficiency``: share of correction re-runs (the failing reply replaced by the preferred one,
  ``Counterfactual.baseline = "correction:<t>"``) that succeed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from metaagent.records import RolloutTree

from .episode import HELPFUL, HELPFUL_ERROR, episode_credit, evaluator_score

PREFIX = "credit/eval_aligned/"


def protocol_metrics(
    trees: Sequence[RolloutTree],
    *,
    score: str = "total",
    success_threshold: float = 1.0,
    exact_max_agents: int = 5,
    permutations: int = 8,
    clip_negative: bool = False,
    **_: object,
) -> dict[str, float]:
    """The protocol metrics of one step (keys under ``credit/eval_aligned/``); takes the estimator's options."""
    alphas: dict[str, list[float]] = defaultdict(list)
    gaps: list[float] = []
    labelled = helpful = 0
    failure_labelled = failure_helpful = 0
    queries: list[int] = []
    runs: list[int] = []
    corrections: list[float] = []
    for tree in trees:
        for _, e in tree.executions():
            ep = episode_credit(
                e, score=score, success_threshold=success_threshold, exact_max_agents=exact_max_agents,
                permutations=permutations, clip_negative=clip_negative,
            )  # fmt: skip
            if ep.status == "ok":
                for agent, a in ep.alpha.items():
                    alphas[agent].append(a)
                full = frozenset(ep.plan.players)  # type: ignore[union-attr]
                for agent, phi in ep.phi.items():
                    rest = full - {agent}
                    if rest in ep.values:
                        gaps.append(abs((ep.values[full] - ep.values[rest]) - phi))
                for t in e.turns:
                    if HELPFUL in t.labels and not t.labels.get(HELPFUL_ERROR):
                        labelled += 1
                        helpful += int(t.labels[HELPFUL] >= 0.5)
            if e.first_error is not None:
                for t in e.turns:
                    if HELPFUL in t.labels:
                        failure_labelled += 1
                        failure_helpful += int(t.labels[HELPFUL] >= 0.5)
                queries.append(len(e.first_error.queries))
                runs.append(sum(1 for cf in e.counterfactuals if cf.baseline.startswith("forced:")))
            for cf in e.counterfactuals:
                if cf.baseline.startswith("correction:"):
                    v = evaluator_score(cf.reward, score=score, success_threshold=success_threshold)
                    if v is not None:
                        corrections.append(float(v > 0))
    out: dict[str, float] = {f"{PREFIX}alpha/{a}": sum(v) / len(v) for a, v in sorted(alphas.items())}
    out[PREFIX + "loo_checks"] = float(len(gaps))
    if gaps:
        out[PREFIX + "loo_gap"] = sum(gaps) / len(gaps)
    out[PREFIX + "labelled_steps"] = float(labelled)
    if labelled:
        out[PREFIX + "helpful_fraction"] = helpful / labelled
    out[PREFIX + "failure_labelled_steps"] = float(failure_labelled)
    if failure_labelled:
        out[PREFIX + "failure_helpful_fraction"] = failure_helpful / failure_labelled
    out[PREFIX + "located_errors"] = float(len(queries))
    if queries:
        out[PREFIX + "localisation_queries"] = sum(queries) / len(queries)
        out[PREFIX + "localisation_runs"] = sum(runs) / len(runs)
    out[PREFIX + "corrections"] = float(len(corrections))
    if corrections:
        out[PREFIX + "correction_efficiency"] = sum(corrections) / len(corrections)
    return out
