"""Adaptive M x N budget (``rollout.adaptive_budget``): executions move from designs whose rewards already
agree to designs whose rewards disagree, within the batch's fixed-M x N budget. No peer offers this: DAPO's
dynamic sampling (``algo.dynamic_sampling``) is flat, it judges whole prompts; a design tree has a level
between prompt and sample, so budget can move between designs of a batch.

Executions run in waves (training rollouts only; evaluation keeps fixed N)::

    budget  = N * (valid designs of the batch)            exactly what fixed M x N would execute
    wave 1  : first_n executions of every valid design    first_n >= 2, so a disagreement can show
    open    = valid designs whose computable rewards are not all equal (>= 2 of them)
    wave k  : the budget left goes one execution at a time, round-robin over the open designs in
              (task, design) order, each capped at max_n executions; stop when nothing is open,
              the budget is spent or every open design is at max_n

A design whose first_n rewards agree stops there; a question whose designs all stopped is "stopped early"
(its executions beyond first_n per design are freed for the batch). A design that is open stays open (its
rewards already disagree), so after wave 2 only the budget or the cap ends the loop. Budget left when no
design is open is not spent (that is the saving). Execution j of design i keeps the seed
``derive_seed(seed, step, task, t, i, j, "execute")`` of fixed M x N: the first N executions of a design
are the very ones fixed M x N would run, and nothing depends on timing.

The budget is per batch (one :meth:`RolloutEngine.rollout` call), not per question: a question whose
executions all agree gives its budget to other questions' disagreeing designs.

Credit with unequal N per design (:mod:`metaagent.credit.matrix` takes rows of any length): a design's
reward (Eq. 4) is the mean over its own executions; executor groups (Eq. 6-7) are over the executions (or
calls) actually run. In ``executor_group: question`` a design given more executions would pull the
question's mean and std towards itself; ``algo.executor_balance: auto`` (the default) therefore weighs every
design of the question alike when this option is on (``design``: member weights ``1/N_i``, rescaled; the
mean is then the mean of the design means, the quantity fixed M x N estimates). A design group of one
computable reward (``executor_group: design``) is a singleton: counted in
``credit/executor_singleton_groups``, advantage 0, masked with ``algo.filter_zero_var``. Caveat: because
stopping depends on the observed rewards, a design's mean over a data-dependent number of executions is
not an unbiased estimate of its success rate (a design stopped at first_n keeps its extreme first-wave
mean); the designer group compares these means as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, PositiveInt

from metaagent.config import Checked
from metaagent.credit import execution_reward
from metaagent.records import RolloutTree

PREFIX = "rollout/adaptive/"


@dataclass
class AdaptiveBudgetConfig(Checked):
    """Adaptive M x N budget (:mod:`metaagent.rollout.adaptive`), off by default (fixed N per design).

    Attributes:
        enabled: run executions in waves and move the budget to designs whose rewards disagree.
        first_n: executions of every valid design in the first wave (>= 2; below ``n_executions``).
        max_n: at most this many executions of one design; None: ``2 * n_executions``.
    """

    enabled: bool = False
    first_n: Annotated[int, Field(ge=2)] = 2
    max_n: PositiveInt | None = None

    def cap(self, n: int) -> int:
        """The per-design cap for ``n`` executions per design in fixed M x N."""
        return self.max_n if self.max_n is not None else 2 * n


def computable_rewards(tree: RolloutTree, i: int) -> list[float]:
    """Design i's execution rewards that could be computed (None left out)."""
    d = tree.designs[i]
    out = [execution_reward(tree, i, j, e) for j, e in enumerate(d.executions)]
    return [r for r in out if r is not None]


def is_open(tree: RolloutTree, i: int) -> bool:
    """Design i's computable rewards disagree (>= 2 of them, not all equal): more executions can tell more."""
    rewards = computable_rewards(tree, i)
    return len(rewards) >= 2 and max(rewards) != min(rewards)


def allot(counts: Sequence[int], open_: Sequence[bool], budget: int, cap: int) -> list[int]:
    """Extra executions per design for one wave: ``budget`` given one at a time, round-robin in order over
    the open designs below ``cap``. ``counts`` are the executions each design has; the result sums to at most
    ``budget`` and never lifts a design above ``cap``.

    >>> allot([2, 2, 2], [True, False, True], 3, 8)
    [2, 0, 1]
    """
    extra = [0] * len(counts)
    while budget > 0:
        given = 0
        for k, (c, o) in enumerate(zip(counts, open_)):
            if budget > 0 and o and c + extra[k] < cap:
                extra[k] += 1
                budget -= 1
                given += 1
        if not given:
            break
    return extra


def adaptive_metrics(trees: Sequence[RolloutTree], n: int, first_n: int) -> dict[str, float]:
    """``rollout/adaptive/*`` of trees rolled out with the adaptive budget and ``n`` executions per design in
    fixed M x N: the budget (``n`` per valid design), executions run, the share used, executions moved
    (beyond ``n`` on a design), designs stopped (fewer than ``n``) and questions stopped early (every valid
    design at or below ``first_n``)."""
    budget = run = moved = stopped = questions_stopped = 0
    for tree in trees:
        valid = [d for d in tree.designs if d.valid]
        budget += n * len(valid)
        run += sum(len(d.executions) for d in valid)
        moved += sum(max(0, len(d.executions) - n) for d in valid)
        stopped += sum(len(d.executions) < n for d in valid)
        questions_stopped += bool(valid) and all(len(d.executions) <= first_n for d in valid)
    return {
        PREFIX + "budget": float(budget),
        PREFIX + "executions": float(run),
        PREFIX + "budget_used": run / budget if budget else 0.0,
        PREFIX + "moved": float(moved),
        PREFIX + "designs_stopped": float(stopped),
        PREFIX + "questions_stopped": float(questions_stopped),
    }
