"""AT-GRPO coder + tester turn rewards (``at_code``) on hand-computed candidates of a bundled code task."""

from __future__ import annotations

import pytest

from metaagent.data import DatasetSpec, load_tasks
from metaagent.records import AgentTurn
from metaagent.rewards.at_code import parse_test
from metaagent.rewards.turn import get_turn_reward


def _turn(role: str, text: str) -> AgentTurn:
    return AgentTurn(0, role, "s", [], text, None, [], [], None, "stop", "m")


@pytest.fixture(scope="module")
def task() -> dict:
    (t,) = [t for t in load_tasks(DatasetSpec(source="bundled", split="train")) if t.id == "bundled-code-absolute_difference"]
    return t.to_dict()  # golden tests: "3 10" -> 7, "10 3" -> 7, "-5 5" -> 10, "7 7" -> 0


RIGHT = "```python\na, b = map(int, input().split())\nprint(abs(a - b))\n```"
HALF = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"  # passes "10 3" and "7 7" only


def test_coder_reward_is_twice_its_golden_pass_rate(task):
    fn = get_turn_reward("at_code")
    assert fn(task, [], _turn("Coder", RIGHT)).total == pytest.approx(2.0)
    half = fn(task, [], _turn("Coder", HALF))
    assert half.components == {"team": 0.5, "loc": 0.5, "s_pass": 0.5} and half.total == pytest.approx(1.0)
    assert fn(task, [], _turn("Coder", "no program here")).total == 0.0  # a computed 0, not an exclusion


def test_tester_local_reward_checks_its_test_against_the_reference(task):
    fn = get_turn_reward("at_code")
    history = [_turn("Coder", HALF)]
    good = fn(task, history, _turn("Tester", "**Test Input:**\n```\n10 3\n```\n**Test Output:**\n```\n7\n```"))
    assert good.components == {"team": 0.5, "loc": 1.0, "s_valid": 1.0, "s_ref": 1.0} and good.total == pytest.approx(1.5)
    wrong = fn(task, history, _turn("Tester", "Test Input:\n10 3\nTest Output:\n-7"))
    assert wrong.components["loc"] == 0.0 and wrong.components["team"] == 0.5  # the team term is the group's constant
    malformed = fn(task, [], _turn("Tester", "I would test with 10 3"))
    assert malformed.components == {"team": 0.0, "loc": 0.0, "s_valid": 0.0, "s_ref": 0.0} and malformed.total == 0.0


def test_uncomputable_candidates_are_none_never_zero(task):
    fn = get_turn_reward("at_code")
    no_ref = dict(task, id="unknown-task")
    assert fn(no_ref, [], _turn("Tester", "Test Input:\n1 2\nTest Output:\n1")).total is None
    assert fn(dict(task, tests=None), [], _turn("Coder", RIGHT)).total is None
    fn_task = dict(task, metadata={"fn_name": "f"})
    assert fn(fn_task, [], _turn("Tester", "Test Input:\n1\nTest Output:\n1")).total is None


def test_parse_test_strips_fences_and_bold():
    assert parse_test("**Test Input:**\n```text\n1 2\n```\n**Test Output:**\n```\n3\n```") == ("1 2", "3")
    assert parse_test("Test Input: 5") is None
