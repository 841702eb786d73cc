"""Dynamic sampling (DAPO, Yu et al. 2025, §3.2 "Dynamic Sampling"), judged per role.

A group whose rewards are all equal gives every member advantage 0 (Eq. 5 / Eq. 7 with std 0): it spends
rollout time and contributes nothing to the gradient. DAPO over-samples and keeps only prompts with
``0 < #correct < G``, drawing further batches until the batch is full. Here a task's tree holds one designer
group (its M designs) and one or M executor groups (``algo.executor_group``); the two roles are judged
separately, and only the roles the stage trains count::

    kept   = first batch's trees with an informative group of a role still short of its target
    while some active role has < target informative groups and extra tasks < max_extra_tasks:
        draw the next batch of tasks (at most the cap's remainder), roll out, keep as above
    target(designer) = B            one designer group per task
    target(executor) = B  or B * M  executor_group = question / design

An informative group has >= 2 members and unequal rewards; the counts come from the paper's grouping
(:func:`metaagent.credit.hierarchical_credit`), the same function that masks them. Trees that add no
informative group of an active role are dropped (not trained on, not written; the step's ``rollout/``
metrics describe the kept trees). When the cap stops the
search short, the step trains on what it kept (``rollout/dynamic_sampling/filled`` is 0). With
``algo.dynamic_sampling.enabled: false`` (the default) nothing is dropped: zero-variance groups only get
advantage 0 (or are masked with ``algo.filter_zero_var``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from metaagent.credit import call_matrix, control_baselines, hierarchical_credit, reward_matrix
from metaagent.records import DESIGNER, EXECUTOR, RolloutTree

PREFIX = "rollout/dynamic_sampling/"


def informative_groups(
    tree: RolloutTree, *, executor_group: str = "question", executor_unit: str = "call"
) -> dict[str, int]:
    """Groups of each role in ``tree`` with >= 2 members and unequal rewards (a tree with a budget-matched
    control, ``algo.designer_baseline: control``: the designer group's rewards are ``D_i = Rbar_i - C(k_i)``)."""
    calls = call_matrix(tree) if executor_unit == "call" else None
    controls = None if tree.control is None else [c for _, c in control_baselines(tree)]
    c = hierarchical_credit(reward_matrix(tree), executor_group=executor_group, calls=calls, controls=controls).counts
    return {
        role: c[f"{role}_groups"] - c[f"{role}_zero_var_groups"] - c[f"{role}_singleton_groups"]
        for role in (DESIGNER, EXECUTOR)
    }


def group_targets(batch_size: int, m_designs: int, executor_group: str) -> dict[str, int]:
    """The informative groups a full batch holds per role."""
    return {DESIGNER: batch_size, EXECUTOR: batch_size * (m_designs if executor_group == "design" else 1)}


def sample_informative(
    first: list[RolloutTree],
    draw: Callable[[int, int], list[RolloutTree]],
    *,
    roles: Iterable[str],
    targets: dict[str, int],
    max_extra_tasks: int,
    batch_size: int,
    executor_group: str = "question",
    executor_unit: str = "call",
) -> tuple[list[RolloutTree], dict[str, float]]:
    """Keep the trees of ``first`` and of further draws that bring informative groups of ``roles``.

    Args:
        first: the step's rolled-out batch.
        draw: ``draw(round, n)`` rolls out ``n`` fresh tasks (round 1, 2, ...) and returns their trees.
        roles: the roles this step trains; only their groups are judged.
        targets: informative groups wanted per role (:func:`group_targets`).
        max_extra_tasks: at most this many tasks are drawn beyond ``first``.
        batch_size: tasks per draw (fewer when the cap's remainder is smaller).

    Returns:
        the kept trees (draw order) and ``rollout/dynamic_sampling/*`` metrics.
    """
    roles = sorted(set(roles))
    if not roles:  # a step that trains nothing keeps its batch
        return first, {PREFIX + "extra_tasks": 0.0, PREFIX + "dropped_tasks": 0.0}
    have = {r: 0 for r in roles}
    kept: list[RolloutTree] = []
    dropped = 0

    def take(trees: list[RolloutTree]) -> None:
        nonlocal dropped
        for tree in trees:
            g = informative_groups(tree, executor_group=executor_group, executor_unit=executor_unit)
            if any(g[r] > 0 and have[r] < targets[r] for r in roles):
                kept.append(tree)
                for r in roles:
                    have[r] += g[r]
            else:
                dropped += 1

    take(first)
    extra = rounds = 0
    while any(have[r] < targets[r] for r in roles) and extra < max_extra_tasks:
        rounds += 1
        new = draw(rounds, min(batch_size, max_extra_tasks - extra))
        if not new:
            break
        extra += len(new)
        take(new)
    metrics: dict[str, float] = {
        PREFIX + "extra_tasks": float(extra),
        PREFIX + "rounds": float(rounds),
        PREFIX + "drawn_tasks": float(len(first) + extra),
        PREFIX + "kept_tasks": float(len(kept)),
        PREFIX + "dropped_tasks": float(dropped),
        PREFIX + "filled": float(all(have[r] >= targets[r] for r in roles)),
    }
    for r in roles:
        metrics[PREFIX + f"informative_groups/{r}"] = float(have[r])
        metrics[PREFIX + f"target_groups/{r}"] = float(targets[r])
    return kept, metrics

