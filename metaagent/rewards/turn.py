"""Per-turn reward sources (records v2): rewards computed *during* an execution for each candidate of an
agent call (tree sampling's turn rewards), and *allocators* that split an execution's reward over its
turns after it ran. Both are registries by name, like the credit estimators.

One signature each::

    turn_reward(task, turns_so_far, candidate) -> TurnReward        # during: one candidate of one call
    allocator(task, execution) -> {turn index: TurnReward}           # after: from the execution's reward

A reward that cannot be computed is ``TurnReward(total=None, error=...)``: counted, excluded, never 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from metaagent.records import AgentTurn, Execution, RolloutTree, TurnReward

from .errors import RewardError

TurnRewardFn = Callable[[Mapping[str, Any], Sequence[AgentTurn], AgentTurn], TurnReward]
Allocator = Callable[[Mapping[str, Any], Execution], dict[int, TurnReward]]

_TURN_REWARDS: dict[str, TurnRewardFn] = {}
_ALLOCATORS: dict[str, Allocator] = {}


def _register(table: dict[str, Any], kind: str, name: str) -> Callable[[Any], Any]:
    if not isinstance(name, str) or not name:
        raise RewardError(f"{kind} name must be a non-empty string, got {name!r}")

    def decorator(fn: Any) -> Any:
        old = table.get(name)
        if old is not None and old is not fn:
            raise RewardError(f"{kind} {name!r} is already registered ({old.__module__}.{old.__name__})")
        table[name] = fn
        return fn

    return decorator


def register_turn_reward(name: str) -> Callable[[TurnRewardFn], TurnRewardFn]:
    return _register(_TURN_REWARDS, "turn reward", name)


def register_allocator(name: str) -> Callable[[Allocator], Allocator]:
    return _register(_ALLOCATORS, "reward allocator", name)


def get_turn_reward(name: str) -> TurnRewardFn:
    if name not in _TURN_REWARDS:
        raise RewardError(f"unknown turn reward {name!r}; known: {sorted(_TURN_REWARDS)}")
    return _TURN_REWARDS[name]


def get_allocator(name: str) -> Allocator:
    if name not in _ALLOCATORS:
        raise RewardError(f"unknown reward allocator {name!r}; known: {sorted(_ALLOCATORS)}")
    return _ALLOCATORS[name]


@register_allocator("shared_outcome")
def shared_outcome(task: Mapping[str, Any], execution: Execution) -> dict[int, TurnReward]:
    """Every turn gets the execution's reward (UnityMAS-O's shared outcome, ``full`` form)."""
    r = execution.reward
    if r is None or r.total is None:
        error = "the execution's reward could not be computed" + (f": {r.error}" if r is not None and r.error else "")
        return {k: TurnReward(None, "allocator", error=error) for k in range(len(execution.turns))}
    return {k: TurnReward(r.total, "allocator", components={"outcome": r.total}) for k in range(len(execution.turns))}


def allocate_turn_rewards(trees: Sequence[RolloutTree], allocator: str) -> dict[str, float]:
    """Write ``allocator``'s per-turn rewards into every executed turn; returns ``reward/turn_*`` counts."""
    fn = get_allocator(allocator)
    counts: Counter[str] = Counter()
    for tree in trees:
        for _, execution in tree.executions():
            rewards = fn(tree.task, execution)
            unknown = sorted(set(rewards) - set(range(len(execution.turns))))
            if unknown:
                raise RewardError(f"allocator {allocator!r} gave rewards to turns {unknown} that do not exist")
            for k, turn in enumerate(execution.turns):
                turn.reward = rewards.get(k)
                if turn.reward is not None:
                    counts["reward/turn_rewards"] += 1
                    counts["reward/turn_reward_errors"] += int(turn.reward.total is None)
    return {k: float(v) for k, v in sorted(counts.items())}
