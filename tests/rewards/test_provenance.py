"""Answer provenance (issue 64, hole 5): an answer the script computed itself scores 0 and is counted
(``answer_not_from_agents``); teams whose answer comes from an agent reply or an agent's program keep their
reward. Whole executions in the real sandbox with scripted agents (the policy only stands in for the model).
"""

from __future__ import annotations

import pytest

from metaagent.data.tasks import Task
from metaagent.policy import ScriptedPolicy
from metaagent.rewards import RewardConfig, reward_metrics, score_execution
from metaagent.rewards.provenance import RULES, answer_from_agents, evidence
from metaagent.workflow import SandboxPool, load_templates
from metaagent.workflow.tools import default_tools

MATH = Task(id="m", domain="math", question="What is 17 * 23?", answer="391")
CODE = Task(id="c", domain="code", question="Read n and print 2n.",
            tests={"inputs": ["3\n", "5\n"], "outputs": ["6\n", "10\n"]},
            metadata={"public_tests": {"inputs": ["3\n"], "outputs": ["6\n"]}})  # fmt: skip
PLAN_ENV = {"name": "planpath", "seed": 3, "size": 5}
PLAN = Task(id="p", domain="plan", question="Move S to G on the grid.", metadata={"env": PLAN_ENV})
QA = Task(id="q", domain="qa", question="Who wrote Hamlet?", answer="William Shakespeare")
PROGRAM = "print(int(input()) * 2)"

#: the attack of the issue: one token-long agent call, then the script parses the task and submits the product
MATH_ATTACK = """\
a = Agent("Helper", "Say ok.")
a("ok")
numbers = [int(w.strip("?")) for w in task.split() if w.strip("?").isdigit()]
submit(f"\\\\boxed{{{numbers[0] * numbers[1]}}}")
"""
CODE_ATTACK = 'a = Agent("Helper", "Say ok.")\na("ok")\nsubmit("```python\\nprint(int(input()) * 2)\\n```")\n'
#: a program the script wrote, run by a tool: its output is the script's work, not the agents'
TOOL_LAUNDERING = 'a = Agent("Helper", "Say ok.")\na("ok")\nsubmit(run_program("print(17 * 23)"))\n'
#: an agent's echo program run on an input the script computed
INPUT_LAUNDERING = """\
coder = Agent("Coder", "You write a Python program that prints its input.")
program = coder("echo")
numbers = [int(w.strip("?")) for w in task.split() if w.strip("?").isdigit()]
submit(run_program(program, str(numbers[0] * numbers[1])))
"""


def _plan_moves() -> str:
    """A shortest move list of PLAN's grid, found on the host (what a script could compute without agents)."""
    from metaagent.envs import make_env
    from metaagent.envs.base import MOVES

    env = make_env(PLAN_ENV)
    moves, pos = [], env.pos
    while pos != env.goal:
        steps = {m: env.legal(pos, m) for m in MOVES}
        want = env.to_goal[pos] - 1
        move = next(m for m, (ok, cell) in steps.items() if ok and env.to_goal.get(cell, -1) == want)
        moves.append(move)
        pos = steps[move][1]
    return "[" + ", ".join(moves) + "]"


MOVES_TEXT = _plan_moves()
PLAN_ATTACK = (
    f'a = Agent("Helper", "Say ok.")\na("ok")\nenv_step("##### {MOVES_TEXT}")\nsubmit("##### {MOVES_TEXT}")\n'
)


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


def fake_agent(task: Task):
    """A scripted team member that answers ``task`` correctly in the form its role prompt asks for."""

    def reply(request) -> str:
        system = request.messages[0]["content"]
        if "Say ok." in system:  # the attacks' one-token call
            return "ok"
        if "unit test for a programming problem" in system:
            return "Test Input:\n3\nTest Output:\n6"
        if "or say CORRECT" in system:
            return "<delivery>CORRECT</delivery>"
        if "Reply VALID" in system:
            return "<delivery>VALID</delivery>"
        if "prints its input" in system:
            return "<delivery>```python\nprint(input())\n```</delivery>"
        if task.domain == "code":
            return f"Here is the program.\n<delivery>```python\n{PROGRAM}\n```</delivery>"
        if task.domain == "plan":
            if "Python program" in system:
                return f"<delivery>```python\nprint('{MOVES_TEXT}')\n```</delivery>"
            return f"<delivery>##### {MOVES_TEXT}</delivery>"
        if task.domain == "qa":
            return "<delivery><answer>William Shakespeare</answer></delivery>"
        if "split a problem" in system:
            return "<delivery>Compute 17 * 20\nCompute 17 * 3</delivery>"
        if "Python" in system:
            return "<delivery>```python\nprint(17 * 23)\n```</delivery>"
        return "17 * 23 = 340 + 51 = 391.\n<delivery>The answer is \\boxed{391}.</delivery>"

    return ScriptedPolicy(reply)


def _scored(pool, script: str, task: Task):
    tools = default_tools(task)
    execution = pool.run(script, task, fake_agent(task), {"timeout_s": 10.0}, tools=tools, seed=0)
    assert execution.status == "ok" and execution.submitted, execution.error
    return execution, score_execution(task, execution, RewardConfig())


@pytest.mark.parametrize(("script", "task"), [(MATH_ATTACK, MATH), (CODE_ATTACK, CODE), (PLAN_ATTACK, PLAN),
                                              (TOOL_LAUNDERING, MATH), (INPUT_LAUNDERING, MATH)],
                         ids=["math", "code", "plan", "script_program", "script_input"])  # fmt: skip
def test_an_answer_the_script_computed_scores_nothing_and_is_counted(pool, script, task):
    _, record = _scored(pool, script, task)
    assert record.correct == 0.0 and record.format == 0.0 and record.total == 0.0
    assert record.details["shortcuts"] == ["answer_not_from_agents"]
    metrics = reward_metrics([record])
    assert metrics["reward/shortcut/answer_not_from_agents"] == 1.0


def test_the_same_answer_from_an_agent_keeps_its_reward(pool):
    honest = 'a = Agent("Solver", "You solve it.")\nsubmit(a(task))\n'
    for task in (MATH, CODE, PLAN):
        _, record = _scored(pool, honest, task)
        assert record.correct == 1.0 and record.details["shortcuts"] == [], (task.domain, record)


def _templates() -> list:
    return [t for t in load_templates() if set(t.domains) & {"math", "code", "plan"}]


@pytest.mark.parametrize("template", _templates(), ids=lambda t: t.name)
def test_every_bank_template_keeps_its_reward_on_a_hand_example(pool, template):
    """Copying a program's output (tool_pair), voting (self_consistency), judges, debates, testers: the answer
    comes from an agent reply or an agent's program, so no template of the bank is refused."""
    domain = next(d for d in ("math", "code", "plan") if d in template.domains)
    task = {"math": MATH, "code": CODE, "plan": PLAN}[domain]
    execution, record = _scored(pool, template.source, task)
    assert "answer_not_from_agents" not in record.details["shortcuts"], (execution.answer, record.details)
    assert record.correct == 1.0, (execution.answer, record.details)


def test_the_qa_rule_reads_words_and_the_tool_rule_reads_programs():
    from metaagent.records import AgentTurn, Execution, ToolCall

    def turn(text: str) -> AgentTurn:
        return AgentTurn(0, "A", "s", [], text, None, [], [], None, "stop", "m")

    said = Execution(index=0, status="ok", turns=[turn("It was William Shakespeare.")])
    assert answer_from_agents("qa", "William Shakespeare", said)
    assert not answer_from_agents("qa", "Christopher Marlowe", said)
    assert not answer_from_agents("qa", "Will", said)  # words, not characters
    tagged = Execution(index=0, status="ok", turns=[turn("<delivery><answer>Seine</answer></delivery>")])
    assert answer_from_agents("qa", "Seine", tagged) and answer_from_agents("qa", "the Seine", tagged)
    # the output of an agent's program counts; the same output of the script's own program does not
    agent = turn("```python\nprint(391)\n```")
    ran = ToolCall(index=0, name="run_program", args={"program": agent.response, "input": ""}, result="391\n",
                   ok=True, after_turn=1)  # fmt: skip
    own = ToolCall(index=0, name="run_program", args={"program": "print(391)\nprint()", "input": ""},
                   result="391\n", ok=True, after_turn=1)  # fmt: skip
    assert "391\n" in evidence(Execution(index=0, status="ok", turns=[agent], tool_calls=[ran]))
    assert "391\n" not in evidence(Execution(index=0, status="ok", turns=[agent], tool_calls=[own]))
    # numbers are read by value: a reply's 0.5 is the submission's 1/2; another number is not
    half = Execution(index=0, status="ok", turns=[turn("so p = 0.5\n\\boxed{0.5}")])
    assert answer_from_agents("math", "\\frac{1}{2}", half) and not answer_from_agents("math", "0.25", half)
    assert set(RULES) == {"math", "code", "plan", "qa"}


def test_a_long_printed_answer_is_a_key_of_the_output_that_printed_it():
    """A program's one-line output longer than a short line (an 80-character string answer) is still an answer
    that output states (the val record strings-001 of the first evidence seed was refused for it)."""
    from metaagent.rewards.provenance import MAX_KEY_LINE_CHARS, math_keys

    long = "ab" * 40
    assert len(long) > MAX_KEY_LINE_CHARS
    assert math_keys(long + "\n") & math_keys(long)
    prose = f"first line\n{long}"
    assert not math_keys(prose) & math_keys(long)  # inside a longer text, a long line is still prose
