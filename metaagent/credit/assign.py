"""Credit over rollout records: read each tree's reward matrix, run an estimator, write the advantages back.

Positions, not record ``index`` fields, address designs, executions and turns: design ``i`` is
``tree.designs[i]``, execution ``(i, j)`` is ``tree.designs[i].executions[j]`` and turn ``(i, j, k)`` is
``...executions[j].turns[k]``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from metaagent.records import Execution, RolloutTree

from .control import DESIGNER_BASELINES, control_baselines
from .groups import DEFAULT_EPS, CreditError
from .matrix import D_DECIMALS, EXECUTOR_UNITS, MatrixCredit, Row, design_reward, flat_credit, hierarchical_credit
from .registry import check_options, get_estimator, register_estimator

#: counters summed over trees into ``credit/<name>`` metrics (always present, 0 when nothing happened)
COUNTERS = (
    "designs",
    "executions",
    "invalid_designs",
    "reward_errors",
    "designs_without_reward",
    "designer_groups",
    "executor_groups",
    "designer_zero_var_groups",
    "executor_zero_var_groups",
    "designer_singleton_groups",
    "executor_singleton_groups",
    "filtered_designs",
    "filtered_executions",
    "executions_without_calls",
)


@dataclass
class TreeCredit:
    """What an estimator returns for one tree. None means "no advantage: do not train on it".

    ``turns`` is for estimators with per-turn credit (AT-GRPO groups, judge process rewards, Shapley): a
    turn listed there uses its own advantage instead of its execution's. ``candidates`` gives each
    candidate of a candidate group (key ``(design, execution, group, candidate)``) its advantage.
    """

    design_rewards: dict[int, float | None] = field(default_factory=dict)
    designer: dict[int, float | None] = field(default_factory=dict)
    executor: dict[tuple[int, int], float | None] = field(default_factory=dict)
    turns: dict[tuple[int, int, int], float] = field(default_factory=dict)
    candidates: dict[tuple[int, int, int, int], float | None] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    # designer_baseline=control: each design's (budget k_i, control reward C(k_i)) (metaagent.credit.control)
    controls: dict[int, tuple[int, float | None]] = field(default_factory=dict)

    @classmethod
    def from_matrix(cls, mc: MatrixCredit) -> TreeCredit:
        executor = {
            (i, j): a for i, row in enumerate(mc.executor) if row is not None for j, a in enumerate(row)
        }
        return cls(
            design_rewards=dict(enumerate(mc.design_rewards)),
            designer=dict(enumerate(mc.designer)),
            executor=executor,
            counts=Counter(mc.counts),
        )


@dataclass
class CreditResult:
    """The trees (advantages filled in place), each tree's credit, and ``credit/*`` metrics."""

    estimator: str
    trees: list[RolloutTree]
    credits: list[TreeCredit]
    metrics: dict[str, float]

    @property
    def turn_advantages(self) -> dict[tuple[int, int, int, int], float]:
        """Per-turn advantages keyed by (tree, design, execution, turn) position; empty for outcome estimators."""
        return {(t, *key): a for t, c in enumerate(self.credits) for key, a in c.turns.items()}


def execution_reward(tree: RolloutTree, i: int, j: int, execution: Execution) -> float | None:
    """The execution's scalar reward, or None when it could not be computed (missing record or total)."""
    if execution.reward is None or execution.reward.total is None:
        return None
    total = execution.reward.total
    if isinstance(total, bool) or not isinstance(total, (int, float)) or not math.isfinite(total):
        raise CreditError(
            f"task {tree.task_id}: designs[{i}].executions[{j}].reward.total is {total!r}; a reward must be a "
            "finite number, or None with RewardRecord.error saying why it could not be computed"
        )
    return float(total)


def design_row(tree: RolloutTree, i: int) -> Row:
    """Design i's rewards in the :mod:`metaagent.credit.matrix` convention: ``[]`` invalid, ``None`` valid but
    never run, else one entry per execution (None where its reward could not be computed)."""
    d = tree.designs[i]
    if not d.valid:
        if d.executions:
            raise CreditError(
                f"task {tree.task_id}: designs[{i}] is invalid (check failed or no script) but has "
                f"{len(d.executions)} execution(s); an invalid design is never executed"
            )
        return []
    if not d.executions:
        return None  # valid but never run: no design reward to compare
    return [execution_reward(tree, i, j, e) for j, e in enumerate(d.executions)]


def reward_matrix(tree: RolloutTree) -> list[Row]:
    """The tree's rewards in the :mod:`metaagent.credit.matrix` convention (one row per design)."""
    return [design_row(tree, i) for i in range(len(tree.designs))]


def call_matrix(tree: RolloutTree) -> list[list[int]]:
    """Agent calls of every execution, in the shape of :func:`reward_matrix` (``[]`` for a design without
    executions)."""
    return [[len(e.turns) for e in d.executions] for d in tree.designs]


def fill_design_rewards(tree: RolloutTree) -> None:
    """Write Eq. 4 (:func:`metaagent.credit.matrix.design_reward`) into every ``Design.reward`` of the tree."""
    for i, d in enumerate(tree.designs):
        d.reward = design_reward(design_row(tree, i))


@register_estimator("hierarchical")
def hierarchical_estimator(
    trees: Sequence[RolloutTree],
    *,
    eps: float = DEFAULT_EPS,
    executor_group: str = "question",
    norm_by_std: bool = True,
    filter_zero_var: bool = False,
    executor_unit: str = "call",
    executor_balance: str = "member",
    designer_baseline: str = "group",
) -> list[TreeCredit]:
    """Paper Eq. 4-7 per tree (question); see :func:`metaagent.credit.matrix.hierarchical_credit`.

    ``executor_unit="call"`` (default, Eq. 6: a trajectory is one agent call) weighs each execution by its
    number of agent calls in the executor statistics; ``"execution"`` counts each execution once.
    ``executor_balance="design"`` weighs each design of a question alike in its executor group (unequal
    executions per design under ``rollout.adaptive_budget``). ``designer_baseline="control"`` (
    :mod:`metaagent.credit.control`): the designer group compares ``D_i = Rbar_i - C(k_i)``, each design's
    reward minus the budget-matched single agent's in ``tree.control``; executor advantages are unchanged.
    """
    if executor_unit not in EXECUTOR_UNITS:
        raise CreditError(f"executor_unit must be one of {EXECUTOR_UNITS}, got {executor_unit!r}")
    if designer_baseline not in DESIGNER_BASELINES:
        raise CreditError(f"designer_baseline must be one of {DESIGNER_BASELINES}, got {designer_baseline!r}")
    out = []
    for t in trees:
        controls = control_baselines(t) if designer_baseline == "control" else None
        credit = TreeCredit.from_matrix(
            hierarchical_credit(
                reward_matrix(t),
                eps=eps,
                executor_group=executor_group,
                norm_by_std=norm_by_std,
                filter_zero_var=filter_zero_var,
                calls=call_matrix(t) if executor_unit == "call" else None,
                executor_balance=executor_balance,
                controls=None if controls is None else [c for _, c in controls],
            )
        )
        if controls is not None:
            credit.controls = dict(enumerate(controls))
            credit.counts["control_errors"] += 0  # always reported under this baseline
        out.append(credit)
    return out


@register_estimator("flat")
def flat_estimator(
    trees: Sequence[RolloutTree],
    *,
    eps: float = DEFAULT_EPS,
    norm_by_std: bool = True,
    filter_zero_var: bool = False,
) -> list[TreeCredit]:
    """Single-level GRPO per tree (Table 3 ablation); see :func:`metaagent.credit.matrix.flat_credit`."""
    return [
        TreeCredit.from_matrix(
            flat_credit(reward_matrix(t), eps=eps, norm_by_std=norm_by_std, filter_zero_var=filter_zero_var)
        )
        for t in trees
    ]


def _stats(prefix: str, values: list[float], metrics: dict[str, float]) -> None:
    metrics[f"{prefix}_count"] = float(len(values))
    if values:
        a = np.asarray(values, dtype=np.float64)
        metrics[f"{prefix}_mean"] = float(a.mean())
        metrics[f"{prefix}_std"] = float(a.std())
        metrics[f"{prefix}_min"] = float(a.min())
        metrics[f"{prefix}_max"] = float(a.max())


def _check_keys(tree: RolloutTree, c: TreeCredit, t: int, name: str) -> None:
    where = f"estimator {name!r}, tree {t} (task {tree.task_id})"
    n = len(tree.designs)
    for i in (*c.designer, *c.design_rewards):
        if not 0 <= i < n:
            raise CreditError(f"{where}: design position {i} out of range (tree has {n} designs)")
    for i, j in c.executor:
        if not (0 <= i < n and 0 <= j < len(tree.designs[i].executions)):
            raise CreditError(f"{where}: execution position ({i}, {j}) does not exist")
    for i, j, k in c.turns:
        if not (0 <= i < n and 0 <= j < len(tree.designs[i].executions)):
            raise CreditError(f"{where}: turn position ({i}, {j}, {k}) names a missing execution")
        if not 0 <= k < len(tree.designs[i].executions[j].turns):
            raise CreditError(f"{where}: turn position ({i}, {j}, {k}) does not exist")
    for i, j, g, k in c.candidates:
        groups = tree.designs[i].executions[j].groups if 0 <= i < n and 0 <= j < len(tree.designs[i].executions) else []
        if not (0 <= g < len(groups) and 0 <= k < len(groups[g].candidates)):
            raise CreditError(f"{where}: candidate position ({i}, {j}, {g}, {k}) does not exist")


def assign_credit(trees: list[RolloutTree], estimator: str = "hierarchical", **options) -> CreditResult:
    """Compute advantages with the named estimator and write them into the trees.

    Every ``Design.advantage``, ``Execution.advantage``, ``AgentTurn.advantage`` and candidate advantage is
    first reset to None, then filled from the estimator (None stays None: not trained on; a turn without
    its own advantage trains with its execution's). ``Design.reward`` is set to the design reward the
    estimator used (Eq. 4). Per-turn advantages are written into the records (so replay shows them) and
    are also in :attr:`CreditResult.turn_advantages`.

    Metrics (``credit/...``): every counter in :data:`COUNTERS`, the totals ``groups``,
    ``zero_var_groups``, ``singleton_groups``, and ``count/mean/std/min/max`` of ``designer_adv``,
    ``executor_adv``, ``design_reward`` and ``execution_reward`` (mean/std/min/max only when count > 0).
    With the control baseline (``designer_baseline="control"``): ``control_reward`` (the mean of the designs'
    ``C(k_i)``), ``design_minus_control`` (the mean of ``D_i = Rbar_i - C(k_i)``, with its count/std/min/max)
    and the counter ``control_errors``; 0 when no design has a control reward.
    """
    if not isinstance(trees, Sequence) or any(not isinstance(t, RolloutTree) for t in trees):
        raise CreditError("assign_credit needs a list of RolloutTree records (read them with read_trees)")
    fn = get_estimator(estimator)
    check_options(estimator, options)
    credits = fn(list(trees), **options)
    if len(credits) != len(trees):
        raise CreditError(f"estimator {estimator!r} returned {len(credits)} results for {len(trees)} trees")

    counts: Counter[str] = Counter()
    designer_adv: list[float] = []
    executor_adv: list[float] = []
    design_rewards: list[float] = []
    execution_rewards: list[float] = []
    control_rewards: list[float] = []
    design_minus_control: list[float] = []
    for t, (tree, c) in enumerate(zip(trees, credits)):
        if not isinstance(c, TreeCredit):
            raise CreditError(
                f"estimator {estimator!r} must return TreeCredit objects, got {type(c).__name__}"
            )
        _check_keys(tree, c, t, estimator)
        counts.update(c.counts)
        for i, d in enumerate(tree.designs):
            d.advantage = c.designer.get(i)
            if i in c.design_rewards:
                d.reward = c.design_rewards[i]
            if d.advantage is not None:
                designer_adv.append(d.advantage)
            if d.reward is not None:
                design_rewards.append(d.reward)
            control = c.controls.get(i, (0, None))[1]
            if control is not None:
                control_rewards.append(control)
                if d.reward is not None:
                    design_minus_control.append(round(d.reward - control, D_DECIMALS))
            for j, e in enumerate(d.executions):
                e.advantage = c.executor.get((i, j))
                if e.advantage is not None:
                    executor_adv.append(e.advantage)
                for k, turn in enumerate(e.turns):
                    turn.advantage = c.turns.get((i, j, k))
                for g, group in enumerate(e.groups):
                    group.advantages = [c.candidates.get((i, j, g, k)) for k in range(len(group.candidates))]
                if e.reward is not None and e.reward.total is not None:
                    execution_rewards.append(float(e.reward.total))

    metrics: dict[str, float] = {f"credit/{k}": float(counts.get(k, 0)) for k in COUNTERS}
    for k in sorted(set(counts) - set(COUNTERS)):  # estimator-specific counters
        metrics[f"credit/{k}"] = float(counts[k])
    for kind in ("groups", "zero_var_groups", "singleton_groups"):
        metrics[f"credit/{kind}"] = float(
            counts.get(f"designer_{kind}", 0) + counts.get(f"executor_{kind}", 0)
        )
    metrics["credit/turn_advantages"] = float(sum(len(c.turns) for c in credits))
    metrics["credit/candidate_advantages"] = float(
        sum(sum(v is not None for v in c.candidates.values()) for c in credits)
    )
    _stats("credit/designer_adv", designer_adv, metrics)
    _stats("credit/executor_adv", executor_adv, metrics)
    _stats("credit/design_reward", design_rewards, metrics)
    _stats("credit/execution_reward", execution_rewards, metrics)
    if any(c.controls for c in credits):  # designer_baseline=control (metaagent.credit.control)
        metrics["credit/control_reward"] = float(np.mean(control_rewards)) if control_rewards else 0.0
        metrics["credit/design_minus_control"] = float(np.mean(design_minus_control)) if design_minus_control else 0.0
        _stats("credit/design_minus_control", design_minus_control, metrics)
    return CreditResult(estimator, list(trees), list(credits), metrics)
