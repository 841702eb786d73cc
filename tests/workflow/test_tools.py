"""The host tools on the real code runner (metaagent.execution.code): each program runs in its own process."""

from __future__ import annotations

from metaagent.data import Task
from metaagent.policy import ScriptedPolicy
from metaagent.workflow import default_tools, load_templates

ADD = Task(
    id="t-add-code",
    domain="code",
    question="Read two integers on one line and print their sum.",
    tests={"inputs": ["1 2\n", "5 5\n", "0 0\n"], "outputs": ["3\n", "10\n", "0\n"]},
    metadata={"public_tests": {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}},
)
GOOD = "Here it is:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```"
BAD = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"


def test_run_tests_reports_pass_fail_and_missing_tests():
    tools = default_tools(ADD)
    assert tools["run_tests"](GOOD).startswith("PASS: 2/2")
    report = tools["run_tests"](BAD)
    assert report.startswith("FAIL: 0/2") and "expected: 3" in report and "got: -1" in report
    no_tests = default_tools(Task(id="m", domain="math", question="1+1?", answer="2"))
    assert no_tests["run_tests"](GOOD).startswith("NO TESTS")
    assert default_tools("an ad-hoc task")["run_tests"](GOOD).startswith("NO TESTS")


def test_run_program_returns_the_output_or_the_error():
    run = default_tools(ADD)["run_program"]
    assert run(GOOD, "20 22\n").strip() == "42"
    assert run("print(2 ** 10)").strip() == "1024"
    crashed = run("raise ValueError('boom')")
    assert crashed.startswith("ERROR (runtime_error)") and "boom" in crashed
    assert run("while True:\n    pass\n").startswith("ERROR (timeout)")


def test_solver_tester_template_repairs_from_real_test_feedback(pool):
    replies = iter([f"<delivery>{BAD}</delivery>", f"<delivery>{GOOD}</delivery>"])
    policy = ScriptedPolicy(lambda r: next(replies))
    template = next(t for t in load_templates() if t.name == "solver_tester")
    ex = pool.run(template.source, ADD, policy, {"timeout_s": 10}, tools=default_tools(ADD))
    assert ex.status == "ok" and ex.answer == GOOD
    assert [c.result.split(":")[0] for c in ex.tool_calls] == ["FAIL", "PASS"]
    assert "got: -1" in ex.turns[1].messages[-1]["content"]  # the coder saw the failing test
