"""AT-GRPO credit (seed 003, "Stronger together", Eq. 1): GRPO within each (environment, agent, turn)
candidate group that tree sampling recorded (``Execution.groups``, see :mod:`metaagent.rollout.branching`).

For the K candidates ``c`` of group ``g = (e, i, t)`` with computable rewards ``r^(c)``::

    A^(c) = (r^(c) - mean_l r^(l)) / (std_ddof1({r^(l)}) + eps)          (Eq. 1; norm_by_std=False: no division)

computed by :func:`metaagent.credit.groups.group_advantages`. Shapes: per group, rewards (K,) -> advantages (K,).
Every candidate is a training sample (Eq. 3: the K-1 unselected ones too).

Explicit cases, each counted under ``credit/at_grpo/*``:

- a candidate whose reward could not be computed (None) is excluded: advantage None (no sample),
  ``excluded_candidates``;
- a group with one computable candidate is a singleton: advantage 0 (metaagent's convention; verl and the
  PettingLLMs code give the raw reward) unless ``allow_singletons=False``, which raises for groups recorded
  with a single candidate (K = 1: nothing to compare) and drops (None) groups left with one after exclusion;
  ``singleton_groups``;
- a zero-variance group gives 0 to every member (``zero_var_groups``); ``filter_zero_var=True`` drops them
  (None), like the reference code's ``filter_method: dapo``;
- a group without any computable reward: ``empty_groups``, all None.

Executed turns that belong to a group take the selected candidate's advantage (the same sample, built
once, from the group). Turns outside any group (roles not branched) get ``fallback``: ``"none"`` (not
trained) or ``"execution"`` (their execution's hierarchical advantage). The designer's advantage is the
hierarchical Eq. 4-5 one on the executions' rewards (``designer_advantage="hierarchical"``) or none.
``selected_is_best`` counts groups whose selected candidate has the highest reward (it must equal the
number of non-empty groups: greedy continuation).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from metaagent.records import RolloutTree

from .assign import TreeCredit, call_matrix, reward_matrix
from .groups import DEFAULT_EPS, CreditError, group_advantages
from .matrix import hierarchical_credit
from .registry import register_estimator

FALLBACKS = ("none", "execution")
DESIGNER_ADVANTAGES = ("hierarchical", "none")


def candidate_advantages(
    rewards: Sequence[float | None], *, eps: float, norm_by_std: bool, filter_zero_var: bool, allow_singletons: bool
) -> tuple[list[float | None], str]:
    """Eq. 1 over one candidate group; returns (advantage per candidate, the group's case:
    ``"ok" | "singleton" | "zero_var" | "empty"``). None rewards are excluded (advantage None)."""
    kept = [c for c, r in enumerate(rewards) if r is not None]
    out: list[float | None] = [None] * len(rewards)
    if not kept:
        return out, "empty"
    res = group_advantages([rewards[c] for c in kept], eps=eps, norm_by_std=norm_by_std)  # type: ignore[misc]
    case = "singleton" if res.singleton else "zero_var" if res.zero_var else "ok"
    if (case == "singleton" and not allow_singletons) or (case == "zero_var" and filter_zero_var):
        return out, case
    for c, a in zip(kept, res.advantages):
        out[c] = a
    return out, case


@register_estimator("at_grpo")
def at_grpo_estimator(
    trees: Sequence[RolloutTree],
    *,
    eps: float = DEFAULT_EPS,
    norm_by_std: bool = True,
    filter_zero_var: bool = False,
    allow_singletons: bool = False,
    fallback: str = "none",
    designer_advantage: str = "hierarchical",
) -> list[TreeCredit]:
    """AT-GRPO Eq. 1 per candidate group (see the module docstring for every case and counter)."""
    if fallback not in FALLBACKS:
        raise CreditError(f"at_grpo: fallback must be one of {FALLBACKS}, got {fallback!r}")
    if designer_advantage not in DESIGNER_ADVANTAGES:
        raise CreditError(f"at_grpo: designer_advantage must be one of {DESIGNER_ADVANTAGES}, got {designer_advantage!r}")
    out = []
    for t, tree in enumerate(trees):
        hier = TreeCredit.from_matrix(hierarchical_credit(reward_matrix(tree), eps=eps, calls=call_matrix(tree)))
        counts = {k: v for k, v in hier.counts.items() if fallback == "execution" or not k.startswith("executor_")}
        credit = TreeCredit(design_rewards=hier.design_rewards, counts=Counter(counts))
        if designer_advantage == "hierarchical":
            credit.designer = hier.designer
        seen: set[str] = set()
        for i, d in enumerate(tree.designs):
            for j, e in enumerate(d.executions):
                if fallback == "execution":
                    credit.executor[(i, j)] = hier.executor.get((i, j))
                selected_adv: dict[int, float | None] = {}
                for g, group in enumerate(e.groups):
                    if group.key in seen:
                        raise CreditError(f"at_grpo: tree {t} (task {tree.task_id}) has two candidate groups keyed {group.key!r}")
                    seen.add(group.key)
                    if len(group.candidates) == 1 and not allow_singletons:
                        raise CreditError(
                            f"at_grpo: group {group.key!r} has one candidate; set rollout.branching.k >= 2 "
                            "(or algo.options.allow_singletons=true to train singletons with advantage 0)"
                        )
                    advs, case = candidate_advantages(
                        group.rewards, eps=eps, norm_by_std=norm_by_std,
                        filter_zero_var=filter_zero_var, allow_singletons=allow_singletons,
                    )  # fmt: skip
                    credit.counts["at_grpo/groups"] += 1
                    credit.counts["at_grpo/candidates"] += len(group.candidates)
                    credit.counts["at_grpo/excluded_candidates"] += sum(r is None for r in group.rewards)
                    credit.counts[f"at_grpo/{case}_groups"] += int(case != "ok")
                    computable = [r for r in group.rewards if r is not None]
                    if computable:
                        credit.counts["at_grpo/selected_is_best"] += int(group.rewards[group.selected] == max(computable))
                    for c, a in enumerate(advs):
                        credit.candidates[(i, j, g, c)] = a
                    selected_adv[group.call_index] = advs[group.selected]
                for k, turn in enumerate(e.turns):
                    if turn.call_index in selected_adv:
                        a = selected_adv[turn.call_index]
                        if a is not None:
                            credit.turns[(i, j, k)] = a
                    elif fallback == "none":
                        credit.counts["at_grpo/ungrouped_turns"] += 1
        for key in ("singleton", "zero_var", "empty"):
            credit.counts.setdefault(f"at_grpo/{key}_groups", 0)
        for key in ("groups", "candidates", "excluded_candidates", "selected_is_best", "ungrouped_turns"):
            credit.counts.setdefault(f"at_grpo/{key}", 0)
        out.append(credit)
    return out
