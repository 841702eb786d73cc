"""Aggregate analysis of a run's designs (paper §4.4 Table 6, App. C Tables 9 and 10).

``stats(run)`` returns plain JSON data:

- ``structure_share[level][benchmark][label]``: share of workflows per benchmark (benchmark = task
  ``source``) at three levels: ``family`` (the paper's single / reflection / ensemble / other of Tables 6
  and 10), ``structure`` and ``pattern`` (:mod:`metaagent.workflow.analysis`); ``ALL`` pools benchmarks.
  ``structure_share_by_domain`` is the same per task domain;
- ``roles``: top role names with counts and the number of distinct names (Table 9, "54 distinct role
  names");
- ``system_prompts``: share of agents whose system prompt is byte-unique across all agents of all
  workflows (App. C, "77.5% of agents receive a byte-unique prompt"); prompts that are not string
  literals (``"?"`` in the analysis) are counted as ``unknown`` and left out of the share;
- ``valid_script_rate`` over designer-sampled designs (frozen designs are always valid), and the checker
  codes that made designs invalid;
- ``executions``: count by status; ``workflow``: mean agents and call sites per workflow, mean agent calls
  and tool calls per execution; ``reward`` per benchmark.

A *workflow* is a valid design. By default (``source="auto"``) the workflows are the designer-sampled
ones when the run has any, else all valid designs (e.g. fixed multi-agent runs); ``workflows_from`` says
which was used.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from statistics import fmean
from typing import Any

from metaagent.eval.analysis import LEVELS, TOP_ROLES, UNKNOWN_TEXT, structure_label
from metaagent.records import EXECUTION_STATUSES, Design, Execution

from .errors import ReplayError
from .run import Run, TreeRef, load_run

ALL = "ALL"
SOURCES = ("auto", "designer", "frozen", "all")


def design_label(design: Design, level: str) -> str:
    """The structure label of a valid design at ``level`` (family / structure / pattern)."""
    if level not in LEVELS:
        raise ReplayError(f"structure level must be one of {tuple(LEVELS)}, got {level!r}")
    return structure_label(design.structure, level)


def _is_frozen(design: Design) -> bool:
    return design.sample is None or design.source.startswith("frozen")


def _designs(refs: Iterable[TreeRef], source: str) -> tuple[list[tuple[TreeRef, Design]], str]:
    if source not in SOURCES:
        raise ReplayError(f"source must be one of {SOURCES}, got {source!r}")
    pairs = [(r, d) for r in refs for d in r.tree.designs]
    if source == "auto":
        source = "designer" if any(d.valid and not _is_frozen(d) for _, d in pairs) else "all"
    if source == "designer":
        pairs = [(r, d) for r, d in pairs if not _is_frozen(d)]
    elif source == "frozen":
        pairs = [(r, d) for r, d in pairs if _is_frozen(d)]
    return pairs, source


def _mean(xs: list[float]) -> float | None:
    return fmean(xs) if xs else None


def _shares(counter: Counter[str], order: tuple[str, ...]) -> dict[str, float]:
    n = sum(counter.values())
    labels = [l for l in order if counter.get(l)] + sorted(l for l in counter if l not in order)
    return {label: counter[label] / n for label in labels} if n else {}


def _share_table(workflows: list[tuple[TreeRef, Design]], key: Any) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for level, order in LEVELS.items():
        groups: dict[str, Counter[str]] = defaultdict(Counter)
        for r, d in workflows:
            label = design_label(d, level)
            groups[key(r)][label] += 1
            groups[ALL][label] += 1
        out[level] = {
            g: _shares(c, order) for g, c in sorted(groups.items(), key=lambda kv: (kv[0] == ALL, kv[0]))
        }
    return out


def stats(run: Run | Any, *, source: str = "auto", top_roles: int = TOP_ROLES) -> dict[str, Any]:
    """Structure shares, role and prompt diversity, validity and execution statistics of a run.

    ``run`` is a :class:`Run` or anything :func:`load_run` accepts; restrict it first with
    ``run.view(kind="val")`` to analyse validation or evaluation records only.
    """
    run = load_run(run)
    pairs, used = _designs(run.refs, source)
    workflows = [(r, d) for r, d in pairs if d.valid]
    sampled = [(r, d) for r, d in pairs if not _is_frozen(d)]
    executions = [(r, e) for r, d in workflows for e in d.executions]
    statuses = Counter(e.status for _, e in executions)
    return {
        "run": run.name,
        "trees": len(run.refs),
        "tasks": len(run.task_ids()),
        "steps": [s for s in run.steps()],
        "kinds": run.kinds(),
        "workflows_from": used,
        "designs": len(pairs),
        "designs_by_source": dict(Counter("frozen" if _is_frozen(d) else "designer" for _, d in pairs)),
        "workflows": len(workflows),
        "workflows_by_benchmark": dict(sorted(Counter(r.benchmark for r, _ in workflows).items())),
        **_validity(sampled),
        "structure_share": _share_table(workflows, lambda r: r.benchmark),
        "structure_share_by_domain": _share_table(workflows, lambda r: str(r.tree.task.get("domain", "?"))),
        **_roles_and_prompts(workflows, top_roles),
        "executions": {
            "total": len(executions),
            "by_status": {s: statuses.get(s, 0) for s in EXECUTION_STATUSES},
        },
        "workflow": {
            "mean_agents": _mean([float((d.structure or {}).get("num_agents", 0)) for _, d in workflows]),
            "mean_call_sites": _mean(
                [float((d.structure or {}).get("num_call_sites", 0)) for _, d in workflows]
            ),
            "mean_agent_calls": _mean([float(len(e.turns)) for _, e in executions]),
            "mean_tool_calls": _mean([float(len(e.tool_calls)) for _, e in executions]),
        },
        "reward": _reward_table(executions),
    }


def _validity(sampled: list[tuple[TreeRef, Design]]) -> dict[str, Any]:
    """The valid-script rate of the sampled (not frozen) designs, per benchmark, and the invalid ones' first
    error codes."""
    valid_by_bench: dict[str, list[float]] = defaultdict(list)
    for r, d in sampled:
        valid_by_bench[r.benchmark].append(1.0 if d.valid else 0.0)
    invalid_codes = Counter(
        (d.check.errors[0].code if d.check.errors else "E-NO-SCRIPT") for _, d in sampled if not d.valid
    )
    return {
        "valid_script_rate": _mean([1.0 if d.valid else 0.0 for _, d in sampled]),
        "valid_script_rate_by_benchmark": {b: fmean(v) for b, v in sorted(valid_by_bench.items())},
        "invalid_reasons": dict(invalid_codes.most_common()),
    }


def _roles_and_prompts(workflows: list[tuple[TreeRef, Design]], top_roles: int) -> dict[str, Any]:
    """Role-name diversity (the ``top_roles`` most common) and byte-unique system prompts of the workflows."""
    roles = Counter(
        role for _, d in workflows for role in (d.structure or {}).get("roles", []) if role != UNKNOWN_TEXT
    )
    prompts = [p for _, d in workflows for p in (d.structure or {}).get("system_prompts", [])]
    known = [p for p in prompts if p != UNKNOWN_TEXT]
    prompt_counts = Counter(known)
    unique = sum(1 for p in known if prompt_counts[p] == 1)
    return {
        "roles": {
            "agents": sum(roles.values()),
            "distinct": len(roles),
            "top": [[name, count] for name, count in roles.most_common(top_roles)],
        },
        "system_prompts": {
            "agents": len(prompts),
            "known": len(known),
            "unknown": len(prompts) - len(known),
            "unique": unique,
            "unique_share": unique / len(known) if known else None,
        },
    }


def _reward_table(executions: list[tuple[TreeRef, Execution]]) -> dict[str, dict[str, Any]]:
    """Per benchmark and over all (``ALL``): executions, scored ones, reward errors, mean reward, correct and
    submitted rates."""
    reward: dict[str, dict[str, Any]] = {}
    for bench in sorted({r.benchmark for r, _ in executions}) + [ALL]:
        rows = [e for r, e in executions if bench == ALL or r.benchmark == bench]
        scored = [e.reward for e in rows if e.reward is not None and e.reward.total is not None]
        reward[bench] = {
            "executions": len(rows),
            "scored": len(scored),
            "reward_errors": len(rows) - len(scored),
            "mean_reward": _mean([float(x.total) for x in scored]),  # type: ignore[arg-type]
            "correct_rate": _mean([float(x.correct or 0.0) for x in scored]),
            "submitted_rate": _mean([1.0 if e.submitted else 0.0 for e in rows]),
        }
    return reward
