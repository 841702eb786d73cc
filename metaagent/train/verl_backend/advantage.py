"""metaagent's credit estimators in verl's advantage-estimator registry, so both backends compute one thing.

Importing this module registers, with ``verl.trainer.ppo.core_algos.register_adv_est``:

- ``metaagent_hierarchical`` — paper Eq. 4-7 (:func:`metaagent.credit.hierarchical_credit`);
- ``metaagent_flat`` — single-level GRPO, the M·N = 8x1 ablation (:func:`metaagent.credit.flat_credit`).

Both take verl's estimator signature ``(token_level_rewards, response_mask, index, config, ...)`` plus the
non-tensor fields hierarchical credit needs, and call metaagent's pure per-question functions:

    index                   question id of each row (verl's ``uid``)
    non_tensor_batch[...]   mas_role ("designer" | "executor"), mas_design (int), mas_execution (int, -1 for designer rows)
    token_level_rewards     (B, R); a row's reward is its sum: R_ij for an executor row (every turn of an
                            execution carries the execution's reward), the design reward Rbar_i (Eq. 4) for
                            a designer row (0 for an invalid design)

Rows of one execution (one per agent turn) or of one design may repeat: they are one group member and must
carry one reward. The batch must hold every member of every group, i.e. every computable execution of every
design and every invalid design of each question, or the group statistics change: :func:`credit_batch` builds
that batch from the records (one row per design and per execution). verl's own ``compute_advantage`` passes
``non_tensor_batch`` to GDPO only, so call these estimators directly (as :func:`member_advantages` does).

Returned advantages are (B, R) with the row's advantage on every ``response_mask`` token, and NaN for rows
that get no advantage (a filtered zero-variance group): such rows must not be trained on, and the training
batch never contains them (``build_samples`` skips samples without advantage).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import get_adv_estimator_fn, register_adv_est

from metaagent.credit import DEFAULT_EPS, design_reward, flat_credit, hierarchical_credit, reward_matrix
from metaagent.learn.samples import Sample
from metaagent.records import RolloutTree
from metaagent.train.schedule import DESIGNER, EXECUTOR

from .errors import VerlBackendError
from .plan import VERL_ESTIMATORS

ROLE, DESIGN, EXECUTION, TREE, CALLS = "mas_role", "mas_design", "mas_execution", "mas_tree", "mas_calls"
DESIGNER_ROW = -1  # mas_execution of a designer row
REWARD_TOL = 1e-6  # relative tolerance between repeated rows of one member


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= REWARD_TOL * max(1.0, abs(a), abs(b))


def _members(
    scores: torch.Tensor, index: Sequence[Any], non_tensor_batch: Mapping[str, np.ndarray]
) -> dict[Any, tuple[dict[int, float], dict[tuple[int, int], float], Counter[tuple[int, int]]]]:
    """question -> (design rewards, execution rewards, agent calls per execution), deduplicating repeated
    rows of one member. Calls come from ``mas_calls`` when the batch has it, else one row = one call."""
    missing = [k for k in (ROLE, DESIGN, EXECUTION) if k not in non_tensor_batch]
    if missing:
        raise VerlBackendError(
            f"non_tensor_batch lacks {missing}; metaagent estimators need {ROLE}, {DESIGN} and {EXECUTION} per row "
            "(build the batch with metaagent.train.verl_backend.advantage.credit_batch)"
        )
    out: dict[Any, tuple[dict[int, float], dict[tuple[int, int], float], Counter[tuple[int, int]]]] = {}
    for r in range(scores.shape[0]):
        role, i, j = (
            non_tensor_batch[ROLE][r],
            int(non_tensor_batch[DESIGN][r]),
            int(non_tensor_batch[EXECUTION][r]),
        )
        reward = float(scores[r])
        if not math.isfinite(reward):
            raise VerlBackendError(
                f"row {r} has reward {reward}; a reward that could not be computed has no row"
            )
        designs, execs, n_rows = out.setdefault(index[r], ({}, {}, Counter()))
        if role == DESIGNER and j == DESIGNER_ROW:
            table, key = designs, i
        elif role == EXECUTOR and j >= 0:
            table, key = execs, (i, j)
            if CALLS in non_tensor_batch:
                n_rows[key] = int(non_tensor_batch[CALLS][r])  # the execution's agent calls, on each of its rows
            else:
                n_rows[key] += 1  # one row per agent call
        else:
            raise VerlBackendError(
                f"row {r}: {ROLE}={role!r} with {EXECUTION}={j} is neither a designer row (-1) nor an executor row (>= 0)"
            )
        if key in table and not _same(table[key], reward):
            raise VerlBackendError(
                f"question {index[r]!r}, {role} member {key}: rows carry different rewards {table[key]} and {reward}; "
                "every turn of an execution carries the execution's reward"
            )
        table[key] = reward
    return out


def _question_rows(
    uid: Any, designs: dict[int, float], execs: dict[tuple[int, int], float]
) -> tuple[list[int], list[list[int]], list[list[float]]]:
    """Design ids, execution ids per design, and the reward rows of metaagent.credit.matrix's convention.

    The designer row's reward must be :func:`metaagent.credit.design_reward` of the executions in the batch."""
    design_ids = sorted(set(designs) | {i for i, _ in execs})
    exec_ids, rows = [], []
    for i in design_ids:
        js = sorted(j for ii, j in execs if ii == i)
        row = [execs[(i, j)] for j in js]
        if i in designs:
            expected = design_reward(row)
            if not _same(designs[i], expected):
                what = (
                    f"the mean {expected} of its executions (Eq. 4)"
                    if row
                    else "0 (an invalid design has no executions)"
                )
                raise VerlBackendError(
                    f"question {uid!r}, design {i}: designer row reward {designs[i]} is not {what}; the batch must "
                    "hold every computable execution of the question (build it with credit_batch)"
                )
        exec_ids.append(js)
        rows.append(row)
    return design_ids, exec_ids, rows


def _estimate(
    credit_fn: Callable[..., Any],
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any] | None,
    non_tensor_batch: Mapping[str, np.ndarray] | None,
    options: dict[str, Any],
) -> tuple[torch.Tensor, torch.Tensor]:
    if non_tensor_batch is None:
        raise VerlBackendError(
            "metaagent estimators need non_tensor_batch (mas_role, mas_design, mas_execution); verl's compute_advantage "
            "passes it to GDPO only, so call get_adv_estimator_fn(name)(..., non_tensor_batch=batch.non_tensor_batch)"
        )
    if index is None:
        raise VerlBackendError("metaagent estimators need index: the question id (uid) of every row")
    if token_level_rewards.shape != response_mask.shape or token_level_rewards.dim() != 2:
        raise VerlBackendError(
            f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask {tuple(response_mask.shape)} "
            "must both be (B, R)"
        )
    scores = token_level_rewards.detach().to(torch.float64).sum(-1)  # (B,)
    advantage: dict[tuple[Any, int, int], float] = {}
    per_call = options.pop("executor_unit", "execution") == "call"
    for uid, (designs, execs, n_rows) in _members(scores, index, non_tensor_batch).items():
        design_ids, exec_ids, rows = _question_rows(uid, designs, execs)
        extra = {"calls": [[n_rows[(i, j)] for j in js] for i, js in zip(design_ids, exec_ids)]} if per_call else {}
        credit = credit_fn(rows, **options, **extra)
        for pos, i in enumerate(design_ids):
            advantage[(uid, i, DESIGNER_ROW)] = _nan(credit.designer[pos])
            for jpos, j in enumerate(exec_ids[pos]):
                advantage[(uid, i, j)] = _nan(credit.executor[pos][jpos])
    values = torch.tensor(
        [
            advantage[(index[r], int(non_tensor_batch[DESIGN][r]), int(non_tensor_batch[EXECUTION][r]))]
            for r in range(scores.shape[0])
        ],
        dtype=token_level_rewards.dtype,
    )  # (B,)
    adv = torch.where(response_mask.bool(), values[:, None], torch.zeros((), dtype=values.dtype))  # (B, R)
    return adv, adv.clone()


def _nan(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def _norm_by_std(norm_by_std: bool | None, config: Any) -> bool:
    if norm_by_std is not None:
        return bool(norm_by_std)
    if config is not None and hasattr(config, "get"):
        return bool(config.get("norm_adv_by_std_in_grpo", True))
    return True


@register_adv_est(VERL_ESTIMATORS["hierarchical"])
def compute_metaagent_hierarchical_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    non_tensor_batch: Mapping[str, np.ndarray] | None = None,
    *,
    eps: float = DEFAULT_EPS,
    executor_group: str = "question",
    norm_by_std: bool | None = None,
    filter_zero_var: bool = False,
    executor_unit: str = "call",
    executor_balance: str = "member",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hierarchical credit (paper Eq. 4-7) in verl's estimator signature; see the module docstring.

    ``norm_by_std`` defaults to ``config.norm_adv_by_std_in_grpo`` (True without a config).
    ``executor_unit="call"``: every executor row is one agent call (Eq. 6), so an execution weighs as many
    times as it has rows; ``"execution"``: repeated rows of an execution are one member.
    Returns ``(advantages, returns)``, both (B, R).
    """
    options = {
        "eps": eps,
        "executor_group": executor_group,
        "executor_unit": executor_unit,
        "norm_by_std": _norm_by_std(norm_by_std, config),
        "filter_zero_var": filter_zero_var,
        "executor_balance": executor_balance,
    }
    return _estimate(
        hierarchical_credit, token_level_rewards, response_mask, index, non_tensor_batch, options
    )


@register_adv_est(VERL_ESTIMATORS["flat"])
def compute_metaagent_flat_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    non_tensor_batch: Mapping[str, np.ndarray] | None = None,
    *,
    eps: float = DEFAULT_EPS,
    norm_by_std: bool | None = None,
    filter_zero_var: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Single-level GRPO over rollouts (Table 3 ablation) in verl's estimator signature."""
    options = {
        "eps": eps,
        "norm_by_std": _norm_by_std(norm_by_std, config),
        "filter_zero_var": filter_zero_var,
    }
    return _estimate(flat_credit, token_level_rewards, response_mask, index, non_tensor_batch, options)


def credit_batch(trees: Sequence[RolloutTree]):
    """One row per group member of every tree: a DataProto for the estimators (module docstring).

    Rewards are float64 so the advantages equal the record-level ones exactly. Executions whose reward
    could not be computed, and designs without any computable reward, have no row (as in
    :func:`metaagent.credit.hierarchical_credit`, where they leave every group).
    """
    from verl import DataProto

    rewards, uids, roles, designs, execs, tree_ids, calls = [], [], [], [], [], [], []

    def add(t: int, tree: RolloutTree, role: str, i: int, j: int, reward: float, n_calls: int = 0) -> None:
        rewards.append(reward)
        uids.append(f"{t}:{tree.task_id}")
        roles.append(role)
        designs.append(i)
        execs.append(j)
        tree_ids.append(t)
        calls.append(n_calls)

    for t, tree in enumerate(trees):
        for i, row in enumerate(reward_matrix(tree)):
            if row is None:
                continue
            rbar = design_reward(row)
            if rbar is None:
                continue  # no computable reward for this design
            add(t, tree, DESIGNER, i, DESIGNER_ROW, rbar)
            for j, x in enumerate(row):
                if x is not None:
                    add(t, tree, EXECUTOR, i, j, x, len(tree.designs[i].executions[j].turns))
    if not rewards:
        raise VerlBackendError("the trees have no computable reward at all; nothing to assign credit to")
    tensors = {
        "token_level_rewards": torch.tensor(rewards, dtype=torch.float64)[:, None],  # (B, 1)
        "response_mask": torch.ones((len(rewards), 1), dtype=torch.long),  # (B, 1)
    }
    non_tensors = {
        "uid": np.array(uids, dtype=object),
        ROLE: np.array(roles, dtype=object),
        DESIGN: np.array(designs, dtype=np.int64),
        EXECUTION: np.array(execs, dtype=np.int64),
        TREE: np.array(tree_ids, dtype=np.int64),
        CALLS: np.array(calls, dtype=np.int64),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def member_advantages(
    trees: Sequence[RolloutTree], estimator: str = "hierarchical", **options: Any
) -> dict[tuple[int, ...], float | None]:
    """Advantages through verl's registry: ``(tree, design) -> A^D`` and ``(tree, design, execution) -> A^E``.

    ``estimator`` is metaagent's name (``hierarchical`` / ``flat``); ``options`` are its keyword options
    (``eps``, ``executor_group``, ``norm_by_std``, ``filter_zero_var``). None = no advantage.
    """
    if estimator not in VERL_ESTIMATORS:
        raise VerlBackendError(
            f"estimator {estimator!r} has no verl counterpart; known: {sorted(VERL_ESTIMATORS)}"
        )
    data = credit_batch(trees)
    fn = get_adv_estimator_fn(VERL_ESTIMATORS[estimator])
    adv, _ = fn(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        config=None,
        non_tensor_batch=data.non_tensor_batch,
        **options,
    )
    nt = data.non_tensor_batch
    out: dict[tuple[int, ...], float | None] = {}
    for r in range(len(data)):
        t, i, j = int(nt[TREE][r]), int(nt[DESIGN][r]), int(nt[EXECUTION][r])
        value = float(adv[r, 0])
        out[(t, i) if j == DESIGNER_ROW else (t, i, j)] = None if math.isnan(value) else value
    return out


def check_sample_advantages(
    samples: Sequence[Sample], members: Mapping[tuple[int, ...], float | None]
) -> float:
    """Raise unless every sample's advantage equals its group member's; returns the largest difference.

    A designer sample (key ``(t, i)``) belongs to member ``(t, i)``; an agent turn ``(t, i, j, k)`` to
    execution ``(t, i, j)``.
    """
    worst = 0.0
    for s in samples:
        key = s.key[:2] if s.role == DESIGNER else s.key[:3]
        expected = members.get(key)
        if expected is None:
            raise VerlBackendError(
                f"sample {s.key} ({s.role}) has advantage {s.advantage} but verl's estimator gives none"
            )
        diff = abs(s.advantage - expected)
        if diff > REWARD_TOL * max(1.0, abs(expected)):
            raise VerlBackendError(
                f"sample {s.key} ({s.role}): advantage {s.advantage} from metaagent.credit but {expected} from verl's "
                "registered estimator; the two backends disagree"
            )
        worst = max(worst, diff)
    return worst
