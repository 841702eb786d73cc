"""Credit of one question's M x N reward matrix (paper §3.2), as pure functions of plain arrays.

Input convention shared by every function here (``rewards``, one row per design, M rows)::

    rewards[i] == [R_i1, ..., R_iN]   a valid design and the rewards of its N executions
    rewards[i] == []                  an invalid design (check failed, no executions): design reward 0
    rewards[i] is None                a design whose reward cannot be computed at all (e.g. valid but not run)
    rewards[i][j] is None             execution j's reward could not be computed: excluded everywhere, counted

A reward that could not be computed is never treated as 0: it leaves every group and gets no advantage
(None), and it is counted in ``reward_errors``. Outputs keep the input shape; None marks "no advantage,
do not train on this". These functions know nothing about records or torch, so the GPU backend can wrap
them in verl's ``register_adv_est`` signature unchanged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from metaagent.records import DESIGNER, EXECUTOR

from .groups import DEFAULT_EPS, CreditError, GroupResult, check_reward, group_advantages

#: D_i = Rbar_i - C_i is rounded to this many decimals, so that float noise does not split designs that tie
D_DECIMALS = 12

EXECUTOR_GROUPS = ("question", "design")
#: what one member of an executor group is: an agent call (Eq. 6: a trajectory is one (c_i, o_i) pair) or
#: a whole execution (each execution counts once, however many calls it made)
EXECUTOR_UNITS = ("call", "execution")
#: how the designs of a question weigh in its executor group: each member alike (Eq. 6), or each design alike
#: whatever its number of executions (unequal N per design, ``rollout.adaptive_budget``)
EXECUTOR_BALANCES = ("member", "design")

Row = Sequence[float | None] | None


@dataclass
class MatrixCredit:
    """Advantages of one question. Lists are indexed like the ``rewards`` rows."""

    design_rewards: list[float | None]  # Eq. 4: mean of the computable execution rewards; 0 for invalid
    designer: list[float | None]  # one per design
    executor: list[list[float | None] | None]  # shape of rewards
    counts: Counter[str] = field(default_factory=Counter)


def _check_rows(rewards: Sequence[Row]) -> list[list[float | None] | None]:
    if isinstance(rewards, (str, bytes)) or not isinstance(rewards, Sequence):
        raise CreditError(
            f"rewards must be a list of M rows (one list of N rewards per design), got {rewards!r}"
        )
    rows: list[list[float | None] | None] = []
    for i, row in enumerate(rewards):
        if row is None:
            rows.append(None)
            continue
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
            raise CreditError(
                f"rewards[{i}] must be a list of execution rewards ([] for an invalid design, None for a design "
                f"without a computable reward), got {row!r}"
            )
        rows.append([None if x is None else check_reward(x, f"rewards[{i}][{j}]") for j, x in enumerate(row)])
    return rows


def design_reward(row: Row) -> float | None:
    """Eq. 4, ``Rbar_i = (1/N) sum_j R_ij``: the mean of design i's computable execution rewards.

    ``[]`` (an invalid design: the check failed, nothing ran) gets 0. The paper does not say what an invalid
    design earns; 0 is this project's choice: a script that cannot run solves nothing, and the designer group
    then teaches the designer to write valid scripts. ``None`` (no row) and a row in which no reward could
    be computed get None (no design reward, left out of the designer group). The one home of this formula:
    the rollout engine, the records, the verl backend and serving all call it.
    """
    if row is None:
        return None
    if not row:
        return 0.0
    ok = [x for x in row if x is not None]
    return sum(ok) / len(ok) if ok else None


def _design_rewards(rows: list[list[float | None] | None], counts: Counter[str]) -> list[float | None]:
    """:func:`design_reward` of every row, counting invalid designs, reward errors and reward-less designs."""
    out: list[float | None] = []
    for row in rows:
        counts["designs"] += 1
        if row is None:
            counts["designs_without_reward"] += 1
        elif not row:
            counts["invalid_designs"] += 1
        else:
            counts["executions"] += len(row)
            counts["reward_errors"] += sum(x is None for x in row)
            if all(x is None for x in row):
                counts["designs_without_reward"] += 1
        out.append(design_reward(row))
    return out


def _count_group(res: GroupResult, role: str, counts: Counter[str]) -> None:
    counts[f"{role}_groups"] += 1
    counts[f"{role}_zero_var_groups"] += int(res.zero_var)
    counts[f"{role}_singleton_groups"] += int(res.singleton)


def _check_options(eps: float, executor_group: str | None = None, executor_balance: str = "member") -> None:
    if not eps >= 0:
        raise CreditError(f"eps must be >= 0, got {eps}")
    if executor_group is not None and executor_group not in EXECUTOR_GROUPS:
        raise CreditError(f"executor_group must be one of {EXECUTOR_GROUPS}, got {executor_group!r}")
    if executor_balance not in EXECUTOR_BALANCES:
        raise CreditError(f"executor_balance must be one of {EXECUTOR_BALANCES}, got {executor_balance!r}")


def design_balanced_weights(designs: Sequence[int], weights: Sequence[float]) -> list[float]:
    """Member weights of one executor group in which every design weighs alike: member k of design
    ``designs[k]`` gets ``weights[k] / n_d`` (``n_d``: the design's members in the group), rescaled so the
    weights sum to ``sum(weights)`` (the group size of Bessel's correction is unchanged).

    With equal ``n_d`` this returns ``weights`` unchanged (fixed M x N). With unequal ``n_d`` (an adaptive
    budget) the group's mean is the one fixed M x N would estimate: ``mu = (sum_d W_d mean_d) / sum_d W_d``
    with ``W_d`` the design's mean weight per member (its mean calls per execution for ``executor_unit=call``,
    1 per execution), i.e. the mean of the design means when every member weighs 1.

    >>> design_balanced_weights([0, 0, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1])
    [0.75, 0.75, 0.75, 0.75, 1.5, 1.5]
    """
    size = Counter(designs)
    raw = [w / size[d] for d, w in zip(designs, weights)]
    scale = sum(weights) / sum(raw)
    return [x * scale for x in raw]


def _check_calls(calls: Sequence[Row] | None, rows: list[list[float | None] | None]) -> list[list[int]] | None:
    """``calls`` must have the shape of ``rewards``: one non-negative integer per execution."""
    if calls is None:
        return None
    if isinstance(calls, (str, bytes)) or not isinstance(calls, Sequence) or len(calls) != len(rows):
        raise CreditError(f"calls must have one row per design ({len(rows)}), like rewards; got {calls!r}")
    out: list[list[int]] = []
    for i, (c_row, row) in enumerate(zip(calls, rows)):
        n = len(row) if row else 0
        c_row = [] if c_row is None else list(c_row)
        if len(c_row) != n or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in c_row):
            raise CreditError(
                f"calls[{i}] must list {n} integer(s) >= 0 (agent calls of each execution of design {i}), got {c_row!r}"
            )
        out.append(c_row)
    return out


def hierarchical_credit(
    rewards: Sequence[Row],
    *,
    eps: float = DEFAULT_EPS,
    executor_group: str = "question",
    norm_by_std: bool = True,
    filter_zero_var: bool = False,
    calls: Sequence[Row] | None = None,
    executor_balance: str = "member",
    controls: Sequence[float | None] | None = None,
) -> MatrixCredit:
    """Hierarchical credit (paper Eq. 4-7) of one question's M x N reward matrix.

    Designer (Eq. 4-5): ``A^D_i = (Rbar_i - mean_M) / (std_M + eps)`` over the M design rewards
    ``Rbar_i = mean_j R_ij`` (0 for invalid designs; designs without a computable reward are left out).
    With ``controls`` (shape (M,): the budget-matched control's reward ``C_i`` of each design,
    :mod:`metaagent.credit.control`) the designer group is over ``D_i = Rbar_i - C_i`` instead (rounded to
    ``D_DECIMALS``); a design whose ``C_i`` is None is left out of it and counted in ``control_errors``.
    ``design_rewards`` stay ``Rbar_i``.

    Executor (Eq. 6-7): ``A^E_ij = (R_ij - mean) / (std + eps)`` over all computable executions of the
    question (``executor_group="question"``, the paper) or over the N executions of each design
    (``executor_group="design"``). Every agent turn of execution ij shares ``A^E_ij``.

    Without ``calls`` each execution is one group member. With ``calls`` (the number of agent calls of
    each execution, the shape of ``rewards``) the members are the calls, as Eq. 6 defines the group over
    trajectories tau in T_ij: execution ij's reward enters mu and sigma ``calls[i][j]`` times, and an
    execution without agent calls is no member (its advantage is None: it has nothing to train).

    Rows may have different lengths N_i (an adaptive budget): design i's reward is the mean over its own
    executions, and each executor group is over the members it has. ``executor_balance="design"`` weighs the
    designs of a question group alike (:func:`design_balanced_weights`), so a design given more executions
    does not pull the baseline and std towards itself; with equal N_i it equals ``"member"``.

    Args:
        rewards: M rows (see module docstring), row i of length N_i.
        eps: added to the std.
        executor_group: "question" (Eq. 6) or "design".
        norm_by_std: False drops the division by ``std + eps`` (Dr. GRPO) in both roles.
        filter_zero_var: members of zero-variance and singleton groups get None (not trained on) instead
            of advantage 0; counted in ``filtered_designs`` / ``filtered_executions``.
        calls: optional agent calls per execution (integers >= 0), the shape of ``rewards``.
        executor_balance: "member" (Eq. 6: every member alike) or "design" (every design alike).
        controls: optional control reward per design (M,), the budget-matched control's.

    Returns:
        :class:`MatrixCredit`; ``designer`` has M entries, ``executor`` the shape of ``rewards``.
    """
    _check_options(eps, executor_group, executor_balance)
    rows = _check_rows(rewards)
    counts: Counter[str] = Counter()
    design_rewards = _design_rewards(rows, counts)
    designer: list[float | None] = [None] * len(rows)
    scores = _designer_scores(design_rewards, controls, counts)
    members = [i for i, r in enumerate(scores) if r is not None]
    if members:
        res = group_advantages([scores[i] for i in members], eps=eps, norm_by_std=norm_by_std)
        _count_group(res, DESIGNER, counts)
        for i, a in zip(members, res.advantages):
            if filter_zero_var and res.degenerate:
                counts["filtered_designs"] += 1
            else:
                designer[i] = a
    call_rows = _check_calls(calls, rows)
    executor: list[list[float | None] | None] = [None if row is None else [None] * len(row) for row in rows]
    if call_rows is not None:
        counts["executions_without_calls"] += sum(
            rows[i][j] is not None and call_rows[i][j] == 0 for i, row in enumerate(rows) if row for j in range(len(row))  # type: ignore[index]
        )
    for group in _executor_groups(rows, call_rows, executor_group):
        if not group:
            continue
        res = group_advantages(
            [rows[i][j] for i, j in group],  # type: ignore[index,misc]
            eps=eps,
            norm_by_std=norm_by_std,
            weights=_member_weights(group, call_rows, executor_balance),
        )
        _count_group(res, EXECUTOR, counts)
        for (i, j), a in zip(group, res.advantages):
            if filter_zero_var and res.degenerate:
                counts["filtered_executions"] += 1
            else:
                executor[i][j] = a  # type: ignore[index]
    return MatrixCredit(design_rewards, designer, executor, counts)


def _designer_scores(
    design_rewards: list[float | None], controls: Sequence[float | None] | None, counts: Counter[str]
) -> list[float | None]:
    """What the designer group of Eq. 5 compares: ``Rbar_i``, or ``D_i = Rbar_i - C_i`` with ``controls``."""
    if controls is None:
        return design_rewards
    if isinstance(controls, (str, bytes)) or not isinstance(controls, Sequence) or len(controls) != len(design_rewards):
        raise CreditError(f"controls must hold one control reward per design ({len(design_rewards)}), got {controls!r}")
    out: list[float | None] = []
    for i, (r, c) in enumerate(zip(design_rewards, controls)):
        c = None if c is None else check_reward(c, f"controls[{i}]")
        if r is not None and c is None:
            counts["control_errors"] += 1
        out.append(None if r is None or c is None else round(r - c, D_DECIMALS))
    return out


def _executor_groups(
    rows: list[list[float | None] | None], call_rows: list[list[int]] | None, executor_group: str
) -> list[list[tuple[int, int]]]:
    """The Eq. 6 groups as (design, execution) indices: one per question or one per design. Members are the
    executions with a computable reward and, with ``call_rows``, at least one agent call."""

    def member(i: int, j: int) -> bool:
        return rows[i][j] is not None and (call_rows is None or call_rows[i][j] > 0)  # type: ignore[index]

    if executor_group == "question":
        return [[(i, j) for i, row in enumerate(rows) if row for j in range(len(row)) if member(i, j)]]
    return [[(i, j) for j in range(len(row)) if member(i, j)] for i, row in enumerate(rows) if row]


def _member_weights(
    group: list[tuple[int, int]], call_rows: list[list[int]] | None, executor_balance: str
) -> list[float] | None:
    """Each member's weight in its group's mean and std: its agent calls (``call_rows``), then, with
    ``executor_balance="design"`` and several designs in the group, rescaled so every design weighs alike."""
    weights = None if call_rows is None else [call_rows[i][j] for i, j in group]
    if executor_balance == "design" and len({i for i, _ in group}) > 1:
        weights = design_balanced_weights([i for i, _ in group], weights or [1] * len(group))
    return weights


def hierarchical_advantages(
    rewards: Sequence[Row],
    *,
    eps: float = DEFAULT_EPS,
    executor_group: str = "question",
    norm_by_std: bool = True,
    filter_zero_var: bool = False,
    calls: Sequence[Row] | None = None,
    executor_balance: str = "member",
) -> tuple[list[float | None], list[list[float | None] | None]]:
    """``(designer_adv, executor_adv)`` of :func:`hierarchical_credit`: M floats and the shape of ``rewards``.

    Entries are None only where the input has no computable reward (or a filtered degenerate group, or an
    execution without agent calls when ``calls`` is given). ``calls`` (agent calls per execution, the shape
    of ``rewards``) makes the executor statistics per call, as Eq. 6-7; without it each execution counts
    once.

    >>> d, e = hierarchical_advantages([[1.0, 0.0], [0.0, 0.0], []])
    >>> [round(x, 4) for x in d], [[round(x, 4) for x in row] for row in e]
    ([1.1547, -0.5773, -0.5773], [[1.5, -0.5], [-0.5, -0.5], []])
    """
    res = hierarchical_credit(
        rewards,
        eps=eps,
        executor_group=executor_group,
        norm_by_std=norm_by_std,
        filter_zero_var=filter_zero_var,
        calls=calls,
        executor_balance=executor_balance,
    )
    return res.designer, res.executor


def flat_credit(
    rewards: Sequence[Row],
    *,
    eps: float = DEFAULT_EPS,
    norm_by_std: bool = True,
    filter_zero_var: bool = False,
) -> MatrixCredit:
    """Single-level GRPO over rollouts: the M·N = 8×1 ablation (paper Table 3).

    Every rollout (a design with one of its executions) is one trajectory with reward ``R_ij``; an invalid
    design is one rollout with reward 0. One group per question::

        A_ij = (R_ij - mean) / (std + eps)        over all rollouts of the question

    The executor advantage of execution ij is ``A_ij``; the designer advantage of design i is the mean of
    its rollouts' advantages (with N = 1 that is the rollout's advantage, so both roles see one signal).
    """
    _check_options(eps)
    rows = _check_rows(rewards)
    counts: Counter[str] = Counter()
    design_rewards = _design_rewards(rows, counts)

    group: list[tuple[int, int | None]] = []  # (design, execution); execution None = invalid design's rollout
    for i, row in enumerate(rows):
        if row is None:
            continue
        if not row:
            group.append((i, None))
        group.extend((i, j) for j, x in enumerate(row) if x is not None)

    designer: list[float | None] = [None] * len(rows)
    executor: list[list[float | None] | None] = [None if row is None else [None] * len(row) for row in rows]
    if group:
        scores = [0.0 if j is None else rows[i][j] for i, j in group]  # type: ignore[index]
        res = group_advantages(scores, eps=eps, norm_by_std=norm_by_std)  # type: ignore[arg-type]
        _count_group(res, EXECUTOR, counts)
        if filter_zero_var and res.degenerate:
            counts["filtered_executions"] += sum(j is not None for _, j in group)
            counts["filtered_designs"] += len({i for i, _ in group})
        else:
            per_design: dict[int, list[float]] = {}
            for (i, j), a in zip(group, res.advantages):
                per_design.setdefault(i, []).append(a)
                if j is not None:
                    executor[i][j] = a  # type: ignore[index]
            for i, advs in per_design.items():
                designer[i] = sum(advs) / len(advs)
    return MatrixCredit(design_rewards, designer, executor, counts)


def flat_advantages(
    rewards: Sequence[Row],
    *,
    eps: float = DEFAULT_EPS,
    norm_by_std: bool = True,
    filter_zero_var: bool = False,
    calls: Sequence[Row] | None = None,
) -> tuple[list[float | None], list[list[float | None] | None]]:
    """``(designer_adv, executor_adv)`` of :func:`flat_credit`.

    ``calls`` exists for the signature shared with :func:`hierarchical_advantages` and must be None: the flat
    ablation groups whole rollouts (one trajectory each), so there is no per-call unit (Eq. 6-7) to weight.
    """
    if calls is not None:
        raise CreditError(
            "flat_advantages has no per-call executor statistics (the flat ablation groups whole rollouts); "
            "drop calls=, or use hierarchical_advantages(calls=...) for per-call groups (Eq. 6-7)"
        )
    res = flat_credit(rewards, eps=eps, norm_by_std=norm_by_std, filter_zero_var=filter_zero_var)
    return res.designer, res.executor
