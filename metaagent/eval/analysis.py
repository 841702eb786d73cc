"""Analyses of evaluation trees (paper §4.4 Table 6, App. C Tables 9 and 10, "which role brings the
improvement?") and the paired comparison of two result sets on the same tasks.

- :func:`design_stats`: structure shares (family / structure / pattern), top role names, the share of
  agents with a byte-unique system prompt, over the valid designs of a set of trees;
- :func:`paired_comparison`: per-task metric difference ``B - A`` with a paired-bootstrap 95% CI, and the
  split of the tasks solved by B but not by A into *same structure* (an executor-side gain: the modal
  pattern of the task's valid designs is the same under A and B) vs *different structure* (a designer
  flip; a side without any valid design counts as different);
- :func:`across_seeds`: per-seed gains (each a paired comparison's ``diff`` and task-bootstrap ``ci95``) as
  their mean with the t interval over seeds (:func:`~metaagent.eval.metrics.seed_interval`), each seed's own
  interval kept as detail.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from metaagent.records import RolloutTree
from metaagent.workflow.analysis import PATTERNS, STRUCTURE_FAMILY, STRUCTURES

from .metrics import DEFAULT_ALPHA, DEFAULT_BOOTSTRAP, paired_bootstrap_ci, seed_interval
from .scoring import TaskScore

LEVELS: dict[str, tuple[str, ...]] = {
    "family": tuple(dict.fromkeys(STRUCTURE_FAMILY.values())),
    "structure": STRUCTURES,
    "pattern": PATTERNS,
}
UNKNOWN_TEXT = "?"  # what workflow.analysis records for a role name or prompt that is not a literal
TOP_ROLES = 10
SOLVED_THRESHOLD = 0.5  # a task is solved under a method when its avg@k is at least this


def structure_label(structure: Mapping[str, Any] | None, level: str) -> str:
    """The label of an analysed design (``Design.structure``) at ``level``: family, structure or pattern."""
    s = structure or {}
    if level == "family":
        return str(s.get("family") or STRUCTURE_FAMILY.get(str(s.get("structure")), "other"))
    return str(s.get(level) or "other")


def _shares(counter: Counter[str], order: tuple[str, ...]) -> dict[str, float]:
    n = sum(counter.values())
    labels = [x for x in order if counter.get(x)] + sorted(x for x in counter if x not in order)
    return {label: counter[label] / n for label in labels} if n else {}


def design_stats(trees: Sequence[RolloutTree], *, top_roles: int = TOP_ROLES) -> dict[str, Any]:
    """Structure shares, role names and system-prompt diversity of the valid designs of ``trees``."""
    designs = [d for t in trees for d in t.designs if d.valid]
    roles = Counter(r for d in designs for r in (d.structure or {}).get("roles", []) if r != UNKNOWN_TEXT)
    prompts = [p for d in designs for p in (d.structure or {}).get("system_prompts", [])]
    known = [p for p in prompts if p != UNKNOWN_TEXT]
    counts = Counter(known)
    unique = sum(1 for p in known if counts[p] == 1)
    return {
        "workflows": len(designs),
        "structure_share": {
            level: _shares(Counter(structure_label(d.structure, level) for d in designs), order)
            for level, order in LEVELS.items()
        },
        "roles": {
            "agents": sum(roles.values()),
            "distinct": len(roles),
            "top": [[name, n] for name, n in roles.most_common(top_roles)],
        },
        "system_prompts": {
            "agents": len(prompts),
            "known": len(known),
            "unique": unique,
            "unique_share": unique / len(known) if known else None,
        },
    }


def paired_comparison(
    a: Sequence[TaskScore],
    b: Sequence[TaskScore],
    *,
    metric: str = "avg",
    k: int,
    n_boot: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    threshold: float = SOLVED_THRESHOLD,
) -> dict[str, Any]:
    """Compare B with A on the tasks both scored: mean difference with paired-bootstrap CI, and the
    App. C split of the tasks solved only by B (and only by A)."""
    attr = "pass_" if metric == "pass" else metric
    by_a = {s.task_id: s for s in a}
    pairs = []
    for sb in b:
        sa = by_a.get(sb.task_id)
        if sa is None:
            continue
        va, vb = getattr(sa, attr).get(k), getattr(sb, attr).get(k)
        if va is not None and vb is not None:
            pairs.append((sa, sb, va, vb))
    out: dict[str, Any] = {"metric": f"{metric}@{k}", "tasks": len(pairs)}
    if not pairs:
        out.update(diff=None, ci95=None)
        return out
    diff, low, high = paired_bootstrap_ci([p[2] for p in pairs], [p[3] for p in pairs], n_boot=n_boot, seed=seed)
    out.update(diff=diff, ci95=[low, high], mean_a=sum(p[2] for p in pairs) / len(pairs))
    out["mean_b"] = out["mean_a"] + diff
    only_b = [(sa, sb) for sa, sb, va, vb in pairs if vb >= threshold > va]
    only_a = [(sa, sb) for sa, sb, va, vb in pairs if va >= threshold > vb]
    same_b = [sb.task_id for sa, sb in only_b if sa.structure is not None and sa.structure == sb.structure]
    out["solved_threshold"] = threshold
    out["both"] = sum(1 for *_, va, vb in pairs if va >= threshold and vb >= threshold)
    out["neither"] = sum(1 for *_, va, vb in pairs if va < threshold and vb < threshold)
    out["only_b"] = len(only_b)
    out["only_b_same_structure"] = len(same_b)
    out["only_b_different_structure"] = len(only_b) - len(same_b)
    out["only_b_same_structure_share"] = len(same_b) / len(only_b) if only_b else None
    out["only_a"] = len(only_a)
    out["only_b_tasks"] = {
        sb.task_id: {"a": sa.structure, "b": sb.structure, "same": sb.task_id in same_b} for sa, sb in only_b
    }
    return out


def across_seeds(
    per_seed: Mapping[Any, Mapping[str, Any]], *, alpha: float = DEFAULT_ALPHA
) -> dict[str, Any]:
    """The headline of a multi-seed result: the mean of the per-seed gains ``diff_s`` (one training seed
    each, e.g. ``auto`` minus the strongest baseline on the same tasks) with the t interval over the S seeds
    (``x̄ ± t_{1-α/2, S-1} s/√S``), and each seed's ``diff`` and paired task-bootstrap ``ci95`` as detail.
    With one seed there is no across-seed interval (``ci95`` None and a note), never a task interval
    instead."""
    detail = {str(seed): {"diff": float(g["diff"]), "ci95": list(g["ci95"]) if g.get("ci95") else None}
              for seed, g in per_seed.items()}  # fmt: skip
    diffs = [d["diff"] for d in detail.values()]
    out: dict[str, Any] = {"seeds": len(diffs), "per_seed": detail, "interval": "t over seeds"}
    if len(diffs) < 2:
        note = "an across-seed interval needs 2 seeds or more"
        out.update(mean=diffs[0] if diffs else None, ci95=None, note=note)
        return out
    mean, low, high = seed_interval(diffs, alpha=alpha)
    out.update(mean=mean, ci95=[low, high])
    return out
