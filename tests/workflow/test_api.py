"""The script API objects, driven by a fake runtime (no worker process)."""

from __future__ import annotations

import pytest

from metaagent.workflow import api, api_reference, rules


class FakeRuntime:
    def __init__(self):
        self.batches = []

    def call_agents(self, calls):
        self.batches.append([(a.name, a._messages(), m) for a, m in calls])
        return [(f"{a.name} says {m}", f"full reply of {a.name} to {m}") for a, m in calls]

    def call_tool(self, name, args, kwargs):
        return "tool"

    def submit(self, answer):
        self.answer = answer
        raise api.Submitted()


@pytest.fixture
def runtime():
    rt = FakeRuntime()
    api.bind_runtime(rt)
    yield rt
    api.bind_runtime(None)


def test_agent_call_returns_text_and_keeps_memory(runtime):
    solver = api.Agent("Solver", "You solve.")
    assert solver("q1") == "Solver says q1"
    solver("q2")
    # the second call saw the first exchange, with the full reply
    assert runtime.batches[1][0][1] == [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "full reply of Solver to q1"},
    ]


def test_memory_false_calls_are_fresh(runtime):
    solver = api.Agent("Solver", "You solve.", memory=False)
    solver("q1")
    solver("q2")
    assert runtime.batches[1][0][1] == []


def test_parallel_broadcasts_and_is_one_batch(runtime):
    a, b, c = (api.Agent(n, "p") for n in "ABC")
    assert api.parallel([a, b, c], "q") == ["A says q", "B says q", "C says q"]
    assert api.parallel(a, ["x", "y"]) == ["A says x", "A says y"]
    assert api.parallel([a, b], ["x", "y"]) == ["A says x", "B says y"]
    assert [len(batch) for batch in runtime.batches] == [3, 2, 2]
    assert api.parallel(a, []) == []


def test_parallel_memory_is_the_snapshot_before_the_call_then_appended_in_order(runtime):
    a = api.Agent("A", "p")
    api.parallel(a, ["x", "y"])
    assert runtime.batches[0][0][1] == [] and runtime.batches[0][1][1] == []
    assert [m["content"] for m in a._history] == ["x", "full reply of A to x", "y", "full reply of A to y"]


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda a: api.parallel([a, a, a], ["x", "y"]), ValueError),
        (lambda a: api.parallel(["not an agent"], "x"), TypeError),
        (lambda a: api.parallel(a, [["nested"]]), TypeError),
        (lambda a: a(["a list"]), TypeError),
        (lambda a: api.Agent("", "p"), TypeError),
        (lambda a: api.Agent("A", None), TypeError),
        (lambda a: api.submit(None), TypeError),
    ],
)
def test_bad_arguments_raise_errors_that_say_what_to_do(runtime, call, error):
    with pytest.raises(error) as info:
        call(api.Agent("A", "p"))
    assert len(str(info.value)) > 20


def test_submit_records_and_stops(runtime):
    with pytest.raises(api.Submitted):
        api.submit(42)
    assert runtime.answer == "42"
    assert not issubclass(api.Submitted, Exception)  # `except Exception` in a script does not swallow it


def test_the_api_only_works_inside_an_execution():
    with pytest.raises(RuntimeError, match="sandboxed execution"):
        api.Agent("A", "p")("hello")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{5}.", "5"),
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{ 7 }", "7"),
        ("no box", ""),
        ("\\boxed{3} and a broken \\boxed{4", "3"),
    ],
)
def test_boxed(text, expected):
    assert api.boxed(text) == expected


def test_majority():
    assert api.majority(["2", "3", "3", "2"]) == "2"  # tie: the earliest wins
    assert api.majority(["", "", "7"]) == "7"  # empty answers do not vote
    assert api.majority([]) == ""


def test_api_reference_is_generated_from_the_api_source():
    ref = api_reference()
    for name in rules.API_NAMES + rules.DEFAULT_TOOL_NAMES:
        assert f"{name}(" in ref
    assert "Agent(name: str, system_prompt: str, memory: bool = True) -> Agent" in ref
    assert "run_program(program: str, input: str = '') -> str" in ref
    assert api.Agent.__doc__.split()[0] in ref  # docstrings are the documentation
    assert ", ".join(rules.SAFE_BUILTINS) in ref
    assert "run_tests" not in api_reference(tool_names=())
