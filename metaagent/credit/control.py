"""Budget-matched control credit (docs/concepts/credit.md has the equations and a worked example).

With ``algo.designer_baseline: control`` each question's tree carries a single-agent control
(:class:`~metaagent.records.Control`: ``K`` executions of the domain's ``sa`` script, run by the rollout engine)
and the designer is credited with what a design adds over one agent *at that design's own budget*:

    c_ij   = agent calls of execution j of design i                     (len(turns))
    k_i    = max(1, ceil((1/N_i) sum_j c_ij))                          budget of design i (N_i = 0: k_i = 1)
    sigma(k) = choose(rule, marks[:k])                                  majority vote of the first k answers
                                                                        (answer domains), or the first of them
                                                                        passing the public tests (code)
    C(k)   = R(s_sigma(k))                                              the control's reward at budget k
    D_i    = Rbar_i - C(k_i)                                            the designer's reward of design i

``Rbar_i`` is Eq. 4 (:func:`metaagent.credit.matrix.design_reward`); ``D_i`` replaces it in the designer group
of Eq. 5 (:func:`metaagent.credit.matrix.hierarchical_credit` with ``controls``). Executor advantages (Eq. 6-7)
are unchanged. A design that spent no agent call (invalid, or cut before its first call) is compared with one
agent at one call, the least budget that answers: writing an invalid script is never as good as writing the
plain single agent. The controls of every budget share one run: the control at ``k`` is the choice among the
first ``k`` executions of the one control of ``K = max_i k_i`` executions, so two designs of one question
with the same ``k`` share one control, and a smaller ``k`` reuses the first executions of a larger one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from metaagent.records import Control, Design, RolloutTree

from .groups import CreditError

#: what the designer's reward is measured against: "group" (Eq. 5: the mean of the question's designs) or
#: "control" (the budget-matched single agent: D_i = Rbar_i - C(k_i), then Eq. 5 over D)
DESIGNER_BASELINES = ("group", "control")


def control_budget(calls: Sequence[int]) -> int:
    """``k_i = max(1, ceil(mean_j c_ij))``: a design's budget in agent calls from its executions' calls
    (shape (N_i,), integers >= 0); ``[]`` (an invalid design, nothing ran) is 1. Rounded up, in integers."""
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in calls):
        raise CreditError(f"agent calls must be integers >= 0, got {list(calls)!r}")
    if not calls:
        return 1
    return max(1, -(-sum(calls) // len(calls)))


def design_budget(design: Design) -> int:
    """:func:`control_budget` of a design's recorded executions."""
    return control_budget([len(e.turns) for e in design.executions])


def control_value(
    rule: str, marks: Sequence[Any], rewards: Sequence[float | None], k: int
) -> tuple[float | None, str | None]:
    """``C(k) = rewards[sigma(k)]`` with ``sigma(k) = choose(rule, marks[:k])`` (shapes: ``marks`` and
    ``rewards`` (K,), ``1 <= k <= K``), and why it is None: the selection could not be made (a public-test run
    failed before the first passing program) or the chosen execution's reward could not be computed."""
    if len(marks) != len(rewards):
        raise CreditError(f"the control has {len(rewards)} executions but {len(marks)} selection marks")
    if not 1 <= k <= len(marks):
        raise CreditError(
            f"a control at budget k={k} needs k executions, the control has {len(marks)}; the rollout engine runs "
            "K = the largest budget of the question's designs (RolloutEngine(controls=True))"
        )
    from metaagent.rewards.selection import choose  # (imported here: credit stays light to import)

    try:
        index, error = choose(rule, marks[:k])
    except ValueError as e:
        raise CreditError(f"control: {e}") from None
    if error is not None:
        return None, error
    reward = rewards[index]
    return reward, None if reward is not None else f"the reward of control execution {index} could not be computed"


def _control_rewards(tree: RolloutTree, control: Control) -> list[float | None]:
    out: list[float | None] = []
    for j, e in enumerate(control.executions):
        total = None if e.reward is None else e.reward.total
        if total is not None and (isinstance(total, bool) or not isinstance(total, (int, float)) or not math.isfinite(total)):
            raise CreditError(f"task {tree.task_id}: control.executions[{j}].reward.total is {total!r}; a finite number or None")
        out.append(None if total is None else float(total))
    return out


def control_baselines(tree: RolloutTree) -> list[tuple[int, float | None]]:
    """``(k_i, C(k_i))`` of every design of ``tree`` (position order), from ``tree.control``."""
    control = tree.control
    if control is None:
        raise CreditError(
            f"task {tree.task_id} has no control: algo.designer_baseline=control needs the rollout engine to run "
            "the budget-matched single agent (RolloutEngine(controls=True); train-metaagent sets it from the config)"
        )
    rewards = _control_rewards(tree, control)
    out = []
    for d in tree.designs:
        k = design_budget(d)
        out.append((k, control_value(control.select, control.marks, rewards, k)[0]))
    return out


def control_size(designs: Sequence[Design]) -> int:
    """``K = max_i k_i``: the control executions a question with these designs needs (1 without designs)."""
    return max((design_budget(d) for d in designs), default=1)
