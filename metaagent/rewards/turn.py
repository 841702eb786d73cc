"""Per-turn reward sources (records v2): rewards computed *during* an execution for each candidate of an
agent call (tree sampling's turn rewards), and *allocators* that split an execution's reward over its
turns after it ran. Both are registries by name (:class:`metaagent.registry.Registry`, plugins in the
entry-point groups ``metaagent.turn_rewards`` and ``metaagent.allocators``), like the credit estimators.

One signature each::

    turn_reward(task, turns_so_far, candidate) -> TurnReward        # during: one candidate of one call
    allocator(task, execution, **options) -> {turn index: TurnReward}  # after: from the execution's reward

The built-in allocators (``shared_outcome``, ``iterative_delta``, ``code_delta``, ``linear``: UnityMAS-O's
rules and Eq. 12) live in :mod:`metaagent.rewards.allocators`; ``metaagent.rewards`` imports it, so they are
registered whenever this module is.

A reward that cannot be computed is ``TurnReward(total=None, error=...)``: counted, excluded, never 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from metaagent.records import AgentTurn, RolloutTree, TurnReward
from metaagent.registry import Registry

from .errors import RewardError

TurnRewardFn = Callable[[Mapping[str, Any], Sequence[AgentTurn], AgentTurn], TurnReward]
Allocator = Callable[..., dict[int, TurnReward]]  # (task, execution, **options)

_TURN_REWARDS: Registry[TurnRewardFn] = Registry("turn reward", RewardError, group="metaagent.turn_rewards")
_ALLOCATORS: Registry[Allocator] = Registry("reward allocator", RewardError, group="metaagent.allocators")

register_turn_reward = _TURN_REWARDS.register
get_turn_reward = _TURN_REWARDS.get
register_allocator = _ALLOCATORS.register
get_allocator = _ALLOCATORS.get
allocator_options = _ALLOCATORS.options
check_allocator_options = _ALLOCATORS.check_options


def allocate_turn_rewards(trees: Sequence[RolloutTree], allocator: str, **options: Any) -> dict[str, float]:
    """Write ``allocator``'s per-turn rewards into every executed turn; returns ``reward/turn_*`` counts
    (``reward/turn_dropped_executions``: executions an allocator dropped with all their turns)."""
    fn = get_allocator(allocator)
    check_allocator_options(allocator, options)
    counts: Counter[str] = Counter()
    for tree in trees:
        for _, execution in tree.executions():
            rewards = fn(tree.task, execution, **options)
            unknown = sorted(set(rewards) - set(range(len(execution.turns))))
            if unknown:
                raise RewardError(f"allocator {allocator!r} gave rewards to turns {unknown} that do not exist")
            for k, turn in enumerate(execution.turns):
                turn.reward = rewards.get(k)
                if turn.reward is not None:
                    counts["reward/turn_rewards"] += 1
                    counts["reward/turn_reward_errors"] += int(turn.reward.total is None)
            if any(t.reward is not None and t.reward.details.get("dropped") for t in execution.turns):
                counts["reward/turn_dropped_executions"] += 1
    return {k: float(v) for k, v in sorted(counts.items())}


def turn_reward_metrics(trees: Sequence[RolloutTree]) -> dict[str, float]:
    """Per-role means of the turn rewards and their components (``reward/turn/<role>``,
    ``reward/turn/<role>/<component>``, computed rewards only) and the rounds each execution used
    (``rollout/rounds_used``: 1 + the largest ``role_turn``, mean over executions with turns; the paper's
    "used turns fall" curve)."""
    totals: dict[str, list[float]] = {}
    rounds: list[int] = []
    for tree in trees:
        for _, execution in tree.executions():
            if execution.turns:
                rounds.append(1 + max(t.role_turn for t in execution.turns))
            for turn in execution.turns:
                r = turn.reward
                if r is None or r.total is None:
                    continue
                totals.setdefault(f"reward/turn/{turn.role}", []).append(r.total)
                for name, value in r.components.items():
                    totals.setdefault(f"reward/turn/{turn.role}/{name}", []).append(value)
    out = {k: sum(v) / len(v) for k, v in sorted(totals.items())}
    if rounds:
        out["rollout/rounds_used"] = sum(rounds) / len(rounds)
        out["rollout/rounds_used_max"] = float(max(rounds))
    return out
