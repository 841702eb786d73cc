"""Step metrics computed from rollout records alone (``rollout/`` namespace)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from statistics import fmean

from metaagent.records import EXECUTION_STATUSES, RolloutTree
from metaagent.rewards.shortcuts import shortcut_metrics


def _mean(xs: Sequence[float]) -> float:
    return fmean(xs) if xs else 0.0


def rollout_metrics(trees: Sequence[RolloutTree]) -> dict[str, float]:
    """Reward per role and domain, valid-script rate, structure shares, the spread of the designer's patterns,
    execution statuses, tokens, and the reward's shortcut counters (``reward/shortcut/<class>``,
    ``reward/no_agent_runs``: hacking shows at step 1).

    ``rollout/pattern_entropy`` (nats) and ``rollout/top_pattern_share`` are over the patterns
    (``workflow.analysis``) of the designer's valid sampled designs: the entropy falls toward 0 and the top share
    toward 1 as the designer collapses onto one team for every task, the designer's counterpart of an actor's
    token entropy. ``rollout/nodes`` and ``rollout/node_share_max``: :func:`node_metrics`."""
    m: dict[str, float] = {}
    designs = [d for t in trees for d in t.designs]
    executions = [(t, e) for t in trees for _, e in t.executions()]
    m["rollout/tasks"] = len(trees)
    m["rollout/designs"] = len(designs)
    m["rollout/executions"] = len(executions)

    sampled = [d for d in designs if d.sample is not None]
    if sampled:
        m["rollout/valid_script_rate"] = _mean([1.0 if d.valid else 0.0 for d in sampled])
        m["rollout/tokens/designer"] = sum(len(d.sample.response_ids) for d in sampled)  # type: ignore[union-attr]
        m["rollout/designer_truncated"] = _mean([d.sample.finish_reason == "length" for d in sampled])  # type: ignore[union-attr]
        patterns = Counter((d.structure or {}).get("pattern", "other") for d in sampled if d.valid)
        if patterns:
            shares = [count / patterns.total() for count in patterns.values()]
            m["rollout/pattern_entropy"] = -sum(p * math.log(p) for p in shares)
            m["rollout/top_pattern_share"] = max(shares)
    design_rewards = [d.reward for d in designs if d.reward is not None]
    m["rollout/reward/designer"] = _mean(design_rewards)

    structures = Counter((d.structure or {}).get("structure", "other") for d in designs if d.valid)
    n_valid = sum(structures.values())
    for name, count in structures.items():
        m[f"rollout/structure/{name}"] = count / n_valid

    statuses = Counter(e.status for _, e in executions)
    for s in EXECUTION_STATUSES:
        m[f"rollout/exec_status/{s}"] = statuses.get(s, 0)

    scored = [(t, e) for t, e in executions if e.reward is not None and e.reward.total is not None]
    m["rollout/reward_errors"] = len(executions) - len(scored)
    m["rollout/reward/executor"] = _mean([e.reward.total for _, e in scored])  # type: ignore[union-attr]
    m["rollout/correct"] = _mean([e.reward.correct or 0.0 for _, e in scored])  # type: ignore[union-attr]
    m["rollout/format"] = _mean([e.reward.format or 0.0 for _, e in scored])  # type: ignore[union-attr]
    for domain in sorted({t.task.get("domain", "?") for t in trees}):
        rows = [e.reward.total for t, e in scored if t.task.get("domain") == domain]  # type: ignore[union-attr]
        if rows:
            m[f"rollout/reward/{domain}"] = _mean(rows)
    m["rollout/submitted"] = _mean([1.0 if e.submitted else 0.0 for _, e in executions])

    turns = [turn for _, e in executions for turn in e.turns]
    m["rollout/turns_per_execution"] = len(turns) / len(executions) if executions else 0.0
    m["rollout/tokens/executor"] = sum(len(turn.response_ids) for turn in turns)
    m["rollout/delivery_rate"] = _mean([1.0 if turn.delivery is not None else 0.0 for turn in turns])
    m.update(shortcut_metrics(e.reward for _, e in executions))
    m.update(control_metrics(trees))
    m.update(budget_metrics(trees))
    m.update(node_metrics(trees))
    return m


def node_metrics(trees: Sequence[RolloutTree]) -> dict[str, float]:
    """Where the executions ran (``rollout.ray_address``): ``rollout/nodes``, the Ray nodes that ran at least one,
    and ``rollout/node_share_max``, the busiest node's share of the executions (``1 / nodes`` when spread evenly,
    1 when one node ran them all); {} when no execution names a node (this machine's sandbox pool)."""
    counts = Counter(e.node for t in trees for _, e in t.executions() if e.node is not None)
    if not counts:
        return {}
    return {"rollout/nodes": float(len(counts)), "rollout/node_share_max": max(counts.values()) / counts.total()}


def control_metrics(trees: Sequence[RolloutTree]) -> dict[str, float]:
    """The budget-matched controls' cost (``algo.designer_baseline: control``): ``rollout/control_calls`` (agent
    calls spent on controls), ``rollout/control_executions`` and ``rollout/control_reward_errors``; {} when no
    tree has a control."""
    controls = [t.control for t in trees if t.control is not None]
    if not controls:
        return {}
    executions = [e for c in controls for e in c.executions]
    return {
        "rollout/control_calls": float(sum(len(e.turns) for e in executions)),
        "rollout/control_executions": float(len(executions)),
        "rollout/control_reward_errors": float(
            sum(e.reward is None or e.reward.total is None for e in executions)
        ),
    }


def budget_metrics(trees: Sequence[RolloutTree]) -> dict[str, float]:
    """Per budget tag (``rollout.budget``) of the step's trees: ``rollout/budget/<TAG>/tasks``, the mean agent
    calls per execution of its designs (``calls_per_execution``: the cost a LOW cap bounds) and their mean
    execution reward (``reward``); {} when no tree has a tag."""
    m: dict[str, float] = {}
    for tag in sorted({t.budget for t in trees if t.budget is not None}):
        tagged = [t for t in trees if t.budget == tag]
        executions = [e for t in tagged for _, e in t.executions()]
        scored = [e.reward.total for e in executions if e.reward is not None and e.reward.total is not None]
        m[f"rollout/budget/{tag}/tasks"] = float(len(tagged))
        m[f"rollout/budget/{tag}/calls_per_execution"] = _mean([float(len(e.turns)) for e in executions])
        m[f"rollout/budget/{tag}/reward"] = _mean(scored)  # type: ignore[arg-type]
    return m
