"""AT-GRPO math turn rewards (reasoner + Python tool) on hand-computed candidates, both mixing presets."""

from __future__ import annotations

import pytest

from metaagent.records import AgentTurn
from metaagent.rewards.turn import get_turn_reward


def _turn(role: str, text: str) -> AgentTurn:
    return AgentTurn(0, role, "s", [], text, None, [], [], None, "stop", "m")


TASK = {"answer": "5"}


def test_reasoner_terms_and_presets():
    right = get_turn_reward("at_math")(TASK, [], _turn("Reasoner", "2+3 = \\boxed{5}"))
    assert right.components == {"team": 1.0, "loc": 1.0, "s_fmt": 1.0, "s_step": 1.0} and right.total == 2.0
    wrong = get_turn_reward("at_math")(TASK, [], _turn("Reasoner", "\\boxed{6}"))
    assert wrong.components["loc"] == pytest.approx(0.2) and wrong.total == pytest.approx(0.2)
    lam = get_turn_reward("at_math_lambda")(TASK, [], _turn("Reasoner", "\\boxed{6}"))
    assert lam.total == pytest.approx(0.7 * 0.0 + 0.3 * 0.2)


def test_tool_terms_use_its_printed_value_and_the_latest_reasoner_answer():
    fn = get_turn_reward("at_math")
    prog = _turn("ToolAgent", "```python\nprint(2 + 3)\n```")
    r = fn(TASK, [_turn("Reasoner", "\\boxed{4}")], prog)
    assert (r.components["s_fmt"], r.components["s_tool"], r.components["s_step"], r.components["team"]) == (1.0, 1.0, 1.0, 0.0)
    assert r.total == pytest.approx(0.0 + 1.0)
    crash = fn(TASK, [], _turn("ToolAgent", "```python\nraise SystemExit(3)\n```"))
    assert crash.components["s_tool"] == 0.0 and crash.total == pytest.approx(0.1)
    assert fn({"answer": None}, [], prog).total is None  # no gold: not computable, never 0


def test_tool_program_inside_a_delivery_block_is_run_as_the_script_would():
    """The script receives the delivery's content (a fence opening right after ``<delivery>`` is not a fence
    at a line start), so the tool's program is read from there: it runs and is formatted."""
    turn = AgentTurn(0, "ToolAgent", "s", [], "<delivery>```python\nprint(5)\n```</delivery>", "```python\nprint(5)\n```", [], [], None, "stop", "m")
    r = get_turn_reward("at_math")(TASK, [], turn)
    assert (r.components["s_fmt"], r.components["s_tool"], r.components["s_step"]) == (1.0, 1.0, 1.0)


def test_plan_tool_program_inside_a_delivery_block_moves_the_env():
    from metaagent.envs import make_env

    env = make_env({"name": "planpath", "seed": 3, "size": 5})
    move = next(m for m in "UDLR" if env.legal(env.pos, m)[0])
    code = f'```python\nprint("[{move}]")\n```'
    turn = AgentTurn(0, "ToolAgent", "s", [], f"<delivery>{code}</delivery>", code, [], [], None, "stop", "m")
    r = get_turn_reward("at_plan")({}, [], turn, env=env)
    assert r.components["s_exec"] == 1.0 and r.components["s_fmt"] == 1.0
