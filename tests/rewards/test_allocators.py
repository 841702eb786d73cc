"""UnityMAS-O's reward allocators against hand-computed traces (seed 001 §6, Eq. 12)."""

from __future__ import annotations

import pytest

from metaagent.records import AgentTurn, CheckReport, Design, Execution, RewardRecord, RolloutTree, ToolCall
from metaagent.rewards.allocators import compose, node_format
from metaagent.rewards.errors import RewardError
from metaagent.rewards.qa import answer_f1, token_f1
from metaagent.rewards.turn import allocate_turn_rewards, get_allocator, turn_reward_metrics

# "read two integers, print their sum": print(3) passes 2 of 4 tests, print(0) none, the sum all
CODE_TASK = {
    "id": "sum", "domain": "code", "question": "Print a+b.",
    "tests": {"inputs": ["1 2\n", "2 2\n", "0 5\n", "3 0\n"], "outputs": ["3\n", "4\n", "5\n", "3\n"]},
}  # fmt: skip
HALF = "<delivery>```python\nprint(3)\n```</delivery>"
NONE = "<delivery>```python\nprint(0)\n```</delivery>"
FULL = "<delivery>```python\na, b = map(int, input().split())\nprint(a + b)\n```</delivery>"
QA_TASK = {"id": "q", "domain": "qa", "question": "Capital of France?", "answer": "Paris"}


def _turn(k: int, role: str, response: str, role_turn: int) -> AgentTurn:
    from metaagent.workflow.protocol import extract_delivery

    return AgentTurn(k, role, "s", [{"role": "user", "content": "q"}], response, extract_delivery(response),
                     [1], [2], [-1.0], "stop", "m", role_turn=role_turn)  # fmt: skip


def _execution(specs, reward=None, tool_calls=()) -> Execution:
    seen: dict[str, int] = {}
    turns = []
    for k, (role, response) in enumerate(specs):
        turns.append(_turn(k, role, response, seen.get(role, 0)))
        seen[role] = seen.get(role, 0) + 1
    return Execution(0, "ok", submitted=True, turns=turns, tool_calls=list(tool_calls),
                     reward=reward or RewardRecord(1.0, 1.0, 0.0))  # fmt: skip


def _rewards(task, execution, name, **options):
    return {k: (r.total, r.components) for k, r in get_allocator(name)(task, execution, **options).items()}


P = "<delivery>plan</delivery>"
R = "<delivery>reflection</delivery>"


def test_code_delta_stops_when_all_pass_and_the_unrun_round_gets_nothing():
    """Round 0 passes 2/4, round 1 all: R = [0.5, 1.0]; round 2 never ran (the loop stopped)."""
    e = _execution([("Planner", P), ("Coder", HALF), ("Reflector", R), ("Planner", P), ("Coder", FULL)])
    out = get_allocator("code_delta")(CODE_TASK, e)
    # planner_0 = coder_0 = R_0 - R_{-1} = 0.5; reflector_0 = R_1 - R_0 = 0.5; planner_1 = coder_1 = 0.5
    assert [out[k].total for k in range(5)] == [0.5, 0.5, 0.5, 0.5, 0.5]
    assert out[2].details["R_next"] == 1.0 and out[4].details["R"] == 1.0
    # the coder's turn terms telescope to the final pass rate
    assert sum(out[k].components["turn"] for k in (1, 4)) == 1.0


def test_code_delta_format_failure_and_a_reflector_whose_next_round_never_ran():
    """Coder_0 writes no program (R_0 = 0, f = -1), reflector_0 forgets the delivery block (f = -1),
    round 1 passes 2/4, then the execution hit a limit after reflector_1 (round 2 never ran)."""
    e = _execution([
        ("Planner", P), ("Coder", "<delivery>I cannot</delivery>"), ("Reflector", "no tags here"),
        ("Planner", P), ("Coder", HALF), ("Reflector", R),
    ])  # fmt: skip
    out = get_allocator("code_delta")(CODE_TASK, e)
    assert out[0].total == 0.0  # planner_0: R_0 - 0 = 0, format ok
    assert out[1].total == -1.0 and out[1].components == {"node": -1.0, "turn": 0.0, "traj": 0.0}
    assert out[2].total == 0.5 - 1.0  # reflector_0: R_1 - R_0 = 0.5, format -1
    assert out[3].total == 0.5 and out[4].total == 0.5  # round 1: 0.5 - 0
    assert out[5].total == 0.0 and out[5].details["next_round_ran"] is False
    # format_weight scales the 0/-1 term only
    half = get_allocator("code_delta")(CODE_TASK, e, format_weight=0.5)
    assert half[1].total == -0.5 and half[2].total == 0.0


def test_code_delta_a_round_that_never_ran_and_a_falling_pass_rate():
    """The limit cut the execution after planner_1: its coder never answered; reflector_0 has no next round."""
    e = _execution([("Planner", P), ("Coder", HALF), ("Reflector", R), ("Planner", P)])
    out = get_allocator("code_delta")(CODE_TASK, e)
    assert [out[k].total for k in range(4)] == [0.5, 0.5, 0.0, 0.0]
    assert out[3].details == {"round": 1, "ran": False, "weights": {"node": 1.0, "turn": 1.0, "traj": 0.0}}
    # R = [1.0, 0.0]: the second coder lost everything the first had: -1; the sum telescopes to R_final = 0
    e = _execution([("Planner", P), ("Coder", FULL), ("Reflector", R), ("Planner", P), ("Coder", NONE)])
    out = get_allocator("code_delta")(CODE_TASK, e)
    assert [out[k].total for k in range(5)] == [1.0, 1.0, -1.0, -1.0, -1.0]
    assert out[1].components["turn"] + out[4].components["turn"] == 0.0


def test_a_failed_verifier_call_drops_the_execution_with_all_its_turns_never_a_zero():
    bad = ToolCall(0, "run_tests", {"program": "x"}, "error: run_tests failed (RunnerError: no fork)", False, 2)
    e = _execution([("Planner", P), ("Coder", HALF), ("Reflector", R)], tool_calls=[bad])
    tree = RolloutTree("run", CODE_TASK, 0, {}, {}, designs=[Design(0, "frozen:x", None, "x", CheckReport(True), executions=[e])])
    counts = allocate_turn_rewards([tree], "code_delta")
    assert all(t.reward.total is None and t.reward.details["dropped"] for t in e.turns)
    assert "tool run_tests failed" in e.turns[0].reward.error
    assert counts == {"reward/turn_dropped_executions": 1.0, "reward/turn_reward_errors": 3.0, "reward/turn_rewards": 3.0}
    assert "reward/turn/Coder" not in turn_reward_metrics([tree])  # errors are not averaged as 0
    # a failed call of a tool the rule does not depend on is not a drop
    ok = get_allocator("code_delta")(CODE_TASK, e, drop_tools=())
    assert ok[1].total == 0.5


def test_uncomputable_tests_drop_the_execution():
    broken = {**CODE_TASK, "tests": {"inputs": ["1 2\n"], "outputs": ["3\n", "4\n"]}}
    e = _execution([("Planner", P), ("Coder", HALF)])
    out = get_allocator("code_delta")(broken, e)
    assert all(r.total is None and r.details["dropped"] for r in out.values()) and len(out) == 2


def test_shared_outcome_full_split_and_format():
    e = _execution([("Decomposer", P), ("Answerer", "<delivery>Paris</delivery>"), ("Answerer", "no block")],
                   reward=RewardRecord(0.8, 0.6, 0.5))  # fmt: skip
    assert _rewards(QA_TASK, e, "shared_outcome")[0] == (0.8, {"node": 0.0, "turn": 0.0, "traj": 0.8})
    full = _rewards(QA_TASK, e, "shared_outcome", outcome="correct", format_weight=1.0)
    assert [full[k][0] for k in range(3)] == [0.6, 0.6, 0.6 - 1.0]
    split = _rewards(QA_TASK, e, "shared_outcome", mode="split", outcome="correct", format_weight=1.0)
    assert [split[k][0] for k in range(3)] == pytest.approx([0.2, 0.2, 0.2 - 1.0])
    with pytest.raises(RewardError, match="share mode"):
        get_allocator("shared_outcome")(QA_TASK, e, mode="half")


def test_iterative_delta_rewards_the_f1_gain_of_each_turn_and_stops_at_end():
    """a_0 = "the city of Paris" (F1 0.5 against "Paris"), a_1 = "Paris" (F1 1); the searcher of turn 2
    says <end>: 0, and the summariser after it in that turn gets nothing."""
    e = _execution([
        ("Searcher", "<delivery>q0</delivery>"), ("Answerer", "<delivery>the city of Paris</delivery>"),
        ("Searcher", "<delivery>q1</delivery>"), ("Summarizer", "<delivery>s1</delivery>"),
        ("Answerer", "<delivery><answer>Paris</answer></delivery>"),
        ("Searcher", "<delivery><end></delivery>"), ("Summarizer", "<delivery>s2</delivery>"),
    ])  # fmt: skip
    out = get_allocator("iterative_delta")(QA_TASK, e, stop_role="Searcher")
    assert out[0].total == 0.5  # turn 0, no earlier answer: F1(a_0)
    assert out[1].total == 0.5  # answer node: F1(a_0)
    assert out[2].total == 0.5 and out[3].total == 0.5  # turn 1: F1(a_1) - F1(a_0)
    assert out[4].total == 1.0
    assert out[5].total == 0.0 and out[5].details["stop"] is True
    assert 6 not in out  # no assignment after <end>
    # a turn whose answer never came: its nodes get 0 (not the previous turn's F1)
    cut = _execution([("Searcher", "<delivery>q0</delivery>"), ("Answerer", "<delivery>Paris</delivery>"),
                      ("Searcher", "no delivery")])  # fmt: skip
    out = get_allocator("iterative_delta")(QA_TASK, cut)
    assert out[2].total == 0.0 - 1.0 and out[2].details["answer_ran"] is False


def test_linear_is_eq_12_over_any_rule():
    e = _execution([("Planner", P), ("Coder", HALF), ("Reflector", "no block"), ("Planner", P), ("Coder", FULL)],
                   reward=RewardRecord(1.4, 1.0, 1.0))  # fmt: skip
    out = get_allocator("linear")(CODE_TASK, e, lambda_node=0.5, lambda_turn=1.0, lambda_traj=2.0, turn_rule="code_delta")
    # reflector_0: 0.5 * (-1) + 1.0 * (1.0 - 0.5) + 2.0 * 1.0
    assert out[2].total == 2.0 and out[2].components == {"node": -1.0, "turn": 0.5, "traj": 1.0}
    assert out[1].total == compose(0.0, 0.5, 1.0, lambda_node=0.5, lambda_turn=1.0, lambda_traj=2.0) == 2.5
    only_traj = get_allocator("linear")(CODE_TASK, e, mode="split")
    assert [only_traj[k].total for k in range(5)] == pytest.approx([0.2] * 5)
    with pytest.raises(RewardError, match="turn_options"):
        get_allocator("linear")(CODE_TASK, e, turn_rule="code_delta", turn_options={"answer_role": "A"})


def test_node_format_kinds_and_f1():
    t = _turn(0, "Planner", "<pseudocode>x</pseudocode> <delivery>```python\nx=1\n```</delivery>", 0)
    assert [node_format(t, k) for k in ("delivery", "code", "pseudocode", "reflection", "none")] == [0, 0, 0, -1, 0]
    assert token_f1("The Eiffel tower!", "eiffel Tower") == 1.0 and token_f1("", "") == 1.0
    assert token_f1("x y z", "z w") == pytest.approx(0.4) and token_f1("a b c", "c d") == 0.5 and answer_f1(None, ["x"]) == 0.0
    assert answer_f1("Paris France", ["London", "paris"]) == pytest.approx(2 / 3)


def test_allocator_options_are_checked_and_metrics_are_per_role():
    e = _execution([("Planner", P), ("Coder", HALF), ("Reflector", R), ("Planner", P), ("Coder", FULL)])
    tree = RolloutTree("run", CODE_TASK, 0, {}, {}, designs=[Design(0, "frozen:x", None, "x", CheckReport(True), executions=[e])])
    with pytest.raises(RewardError, match="allowed"):
        allocate_turn_rewards([tree], "code_delta", lambda_node=1.0)
    allocate_turn_rewards([tree], "code_delta")
    m = turn_reward_metrics([tree])
    assert m["reward/turn/Coder"] == 0.5 and m["reward/turn/Reflector"] == 0.5
    assert m["reward/turn/Coder/node"] == 0.0 and m["rollout/rounds_used"] == 2.0
