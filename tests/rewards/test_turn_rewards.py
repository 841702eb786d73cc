"""Per-turn reward sources: registries by name, an allocator written into the records, errors never 0."""

from __future__ import annotations

import pytest

from metaagent.records import AgentTurn, Execution, RewardRecord, RolloutTree, TurnReward
from metaagent.rewards.errors import RewardError
from metaagent.rewards.turn import (
    allocate_turn_rewards,
    get_turn_reward,
    register_allocator,
    register_turn_reward,
)


def _turn(k: int, role: str) -> AgentTurn:
    return AgentTurn(k, role, "s", [{"role": "user", "content": "q"}], "r", "r", [1], [2], [-1.0], "stop", "m")


def _tree(*rewards) -> RolloutTree:
    from metaagent.records import CheckReport, Design

    execs = [Execution(j, "ok", turns=[_turn(0, "A"), _turn(1, "B")], reward=r) for j, r in enumerate(rewards)]
    d = Design(0, "designer", None, "x", CheckReport(True), executions=execs)
    return RolloutTree("run", {"id": "t", "domain": "math"}, 0, {}, {}, designs=[d])


def test_shared_outcome_writes_the_execution_reward_into_every_turn_and_errors_stay_errors():
    tree = _tree(RewardRecord(1.4, 1.0, 1.0), RewardRecord(None, None, None, error="runner crashed"))
    counts = allocate_turn_rewards([tree], "shared_outcome")
    ok, bad = tree.designs[0].executions
    assert [t.reward.total for t in ok.turns] == [1.4, 1.4] and ok.turns[0].reward.source == "allocator"
    assert all(t.reward.total is None and "runner crashed" in t.reward.error for t in bad.turns)
    assert counts == {"reward/turn_dropped_executions": 1.0, "reward/turn_reward_errors": 2.0, "reward/turn_rewards": 4.0}


def test_registered_sources_by_name_and_their_errors():
    @register_allocator("last_turn_only_test")
    def last(task, execution, **options):
        return {len(execution.turns) - 1: TurnReward(1.0, "allocator")}

    tree = _tree(RewardRecord(1.0, 1.0, 0.0))
    allocate_turn_rewards([tree], "last_turn_only_test")
    assert [t.reward for t in tree.designs[0].executions[0].turns][0] is None

    @register_turn_reward("length_test")
    def length(task, turns_so_far, candidate):
        return TurnReward(float(len(candidate.response)), "env")

    assert get_turn_reward("length_test")({}, [], _turn(0, "A")).total == 1.0
    with pytest.raises(RewardError, match="known"):
        allocate_turn_rewards([tree], "no_such_allocator")

    @register_allocator("bad_turns_test")
    def bad(task, execution, **options):
        return {7: TurnReward(1.0, "allocator")}

    with pytest.raises(RewardError, match="do not exist"):
        allocate_turn_rewards([tree], "bad_turns_test")
