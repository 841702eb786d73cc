from __future__ import annotations

import pytest

from metaagent.records import CheckReport
from metaagent.workflow import check_script, rules

OK = 'solver = Agent("S", "You solve.")\nsubmit(solver(task))\n'


def codes(source: str, **kw) -> list[str]:
    return [d.code for d in check_script(source, **kw).errors]


def test_a_plain_script_passes():
    report = check_script(OK)
    assert isinstance(report, CheckReport)
    assert report.ok and report.errors == [] and report.warnings == []


def test_brief_example_passes():
    source = (
        'solver = Agent("AlgebraSolver", "You solve competition algebra step by step.")\n'
        'critic = Agent("MathCritic", "You check a proposed solution line by line.")\n'
        "draft = solver(task)\n"
        "for _ in range(2):\n"
        '    review = critic(f"Problem:\\n{task}\\n\\nProposed solution:\\n{draft}")\n'
        '    if "CORRECT" in review:\n'
        "        break\n"
        '    draft = solver(f"Revise your solution using this review:\\n{review}")\n'
        "submit(draft)\n"
    )
    assert check_script(source).ok


def test_diagnostics_carry_position_code_and_actionable_message():
    report = check_script(OK + "x = task.format(1)\n")
    assert not report.ok
    (d,) = report.errors
    assert (d.line, d.col, d.code) == (3, 9, "E-ATTR")
    assert "format" in d.message and "f-string" in d.message and "strip" in d.message


@pytest.mark.parametrize(
    "source, code",
    [
        (42, "E-TYPE"),
        ("  \n", "E-EMPTY"),
        ("x = 1\n" * (rules.MAX_SCRIPT_CHARS // 6 + 1), "E-SIZE"),
        ("solver = Agent('S', 'p'\nsubmit(solver(task))\n", "E-SYNTAX"),
        ("x = \0\n", "E-SYNTAX"),
        ("x = " + "(" * 5000 + "1" + ")" * 5000 + "\n", "E-SYNTAX"),  # CPython refuses; libcst would crash
        ("x = " + "-" * (rules.MAX_NESTING + 5) + "1\n" + OK, "E-NESTING"),
        ("import os\n" + OK, "E-IMPORT"),
        ("from math import sqrt\n" + OK, "E-IMPORT"),
        ("class A:\n    pass\n" + OK, "E-UNSUPPORTED"),
        ("def f():\n    global x\n" + OK, "E-UNSUPPORTED"),
        ("def f():\n    x = 1\n    def g():\n        nonlocal x\n" + OK, "E-UNSUPPORTED"),
        ("async def f():\n    pass\n" + OK, "E-UNSUPPORTED"),
        ("def f():\n    yield 1\n" + OK, "E-UNSUPPORTED"),
        ("with x:\n    pass\n" + OK, "E-UNSUPPORTED"),
        ("x: int = 1\n" + OK, "E-UNSUPPORTED"),
        ("@f\ndef g():\n    pass\n" + OK, "E-UNSUPPORTED"),
        ("match task:\n    case _:\n        pass\n" + OK, "E-UNSUPPORTED"),
        ("x = task.__class__\n" + OK, "E-DUNDER"),
        ("x = __builtins__\n" + OK, "E-DUNDER"),
        ("_x = 1\n" + OK, "E-PRIVATE"),
        ("x = task.upper().zzz\n" + OK, "E-ATTR"),
        ("x = eval('1')\n" + OK, "E-FORBIDDEN"),
        ("x = open('f')\n" + OK, "E-FORBIDDEN"),
        ("x = getattr(task, 'upper')\n" + OK, "E-FORBIDDEN"),
        ("x = undefined_thing\n" + OK, "E-NAME"),
        ("len = 3\n" + OK, "E-SHADOW"),
        ("task = 'other'\n" + OK, "E-SHADOW"),
        ("for submit in [1]:\n    pass\n" + OK, "E-SHADOW"),
        ('solver = Agent("S", "p")\nsubmit("42")\n', "E-NO-AGENT"),
        ("submit(task)\n", "E-NO-AGENT"),
    ],
)
def test_each_refusal_has_its_stable_code(source, code):
    report = check_script(source)
    assert not report.ok
    assert code in [d.code for d in report.errors], report.errors
    assert code in rules.CODES


def test_warnings_do_not_refuse():
    report = check_script('solver = Agent("S", "p")\ntry:\n    x = solver(task)\nexcept:\n    x = ""\n')
    assert report.ok
    assert {w.code for w in report.warnings} == {"W-NO-SUBMIT", "W-BARE-EXCEPT"}


def test_agent_calls_through_parallel_lists_and_helpers_count():
    assert check_script('a = [Agent("A", "p"), Agent("B", "p")]\nsubmit(parallel(a, task)[0])\n').ok
    assert check_script('a = [Agent("A", "p")]\nsubmit(a[0](task))\n').ok
    assert check_script(
        'a = Agent("A", "p")\ndef ask(agent, q):\n    return agent(q)\nsubmit(ask(a, task))\n'
    ).ok


def test_custom_tool_names_are_known_only_when_declared():
    source = OK + "r = lookup(task)\n"
    assert "E-NAME" in codes(source)
    assert check_script(source, tool_names=["lookup"]).ok


def test_never_raises_and_returns_private_copies():
    a = check_script("x = task.__class__\n")
    a.errors.clear()
    assert check_script("x = task.__class__\n").errors  # the cache was not mutated
    assert check_script(b"bytes").errors[0].code == "E-TYPE"  # type: ignore[arg-type]


# ---- escape attempts (the checker's layer; the sandbox's own layers are in test_adversarial.py) -----------

ESCAPES = {
    "format string reads attributes": ('x = "{0.__class__}".format(task)', "E-ATTR"),
    "format_map": ('x = "{a}".format_map({"a": task})', "E-ATTR"),
    "f-string attribute": ('x = f"{task.__class__.__mro__}"', "E-DUNDER"),
    "f-string nested spec": ('x = f"{task:{task.__doc__}}"', "E-DUNDER"),
    "generator frame": ("g = (i for i in [1])\nx = g.gi_frame.f_globals", "E-ATTR"),
    "frame globals": ("x = f.f_globals", "E-ATTR"),
    "exception traceback": ("try:\n    1 / 0\nexcept Exception as e:\n    x = e.__traceback__", "E-DUNDER"),
    "exception with_traceback": (
        "try:\n    1 / 0\nexcept Exception as e:\n    x = e.with_traceback(None)",
        "E-ATTR",
    ),
    "getattr with a string": ('x = getattr(task, "__cl" + "ass__")', "E-FORBIDDEN"),
    "__import__": ('os = __import__("os")', "E-DUNDER"),
    "importlib": ("import importlib", "E-IMPORT"),
    "builtins dict": ('x = __builtins__["eval"]', "E-DUNDER"),
    "builtins module": ("import builtins", "E-IMPORT"),
    "shadow a builtin": ("str = lambda x: x", "E-SHADOW"),
    "shadow a guard by assignment": ("_getattr_ = lambda o, n: 1", "E-PRIVATE"),
    "positional-only guard shadowing": ("def f(_getattr_=None, /):\n    return task.upper", "E-PRIVATE"),
    "subclasses walk": ("x = ().__class__.__bases__[0].__subclasses__()", "E-DUNDER"),
    "type()": ("x = type(task)", "E-FORBIDDEN"),
    "vars()": ("x = vars()", "E-FORBIDDEN"),
    "globals()": ('x = globals()["task"]', "E-FORBIDDEN"),
    "exec": ('exec("import os")', "E-FORBIDDEN"),
    "compile": ('c = compile("1", "f", "eval")', "E-FORBIDDEN"),
    "catch BaseException": ("try:\n    pass\nexcept BaseException:\n    pass", "E-FORBIDDEN"),
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_attempts_are_refused_with_their_code(name):
    snippet, code = ESCAPES[name]
    report = check_script(snippet + "\n" + OK)
    assert code in [d.code for d in report.errors], (name, report.errors)


def test_the_designers_api_text_and_the_no_submit_warning_say_what_the_reward_does():
    """An execution that never submits has no final answer and scores 0 (rewards/score.py); the designer's API
    reference and the checker's W-NO-SUBMIT warning must say so, not that the last agent reply is used."""
    from metaagent.data.tasks import Task
    from metaagent.records import AgentTurn, Execution
    from metaagent.rewards import score_execution
    from metaagent.workflow import api_reference

    task = Task(id="t", domain="math", question="What is 2 + 3?", answer="5", source="test")
    reply = "<delivery>\\boxed{5}</delivery>"
    turn = AgentTurn(0, "S", "p", [], reply, "\\boxed{5}", [], [], None, "stop", "m")
    record = score_execution(task, Execution(0, "ok", answer="\\boxed{5}", submitted=False, turns=[turn]))
    assert (record.correct, record.total) == (0.0, 0.0)  # the right answer in the last reply does not count

    (warning,) = [w for w in check_script('solver = Agent("S", "p")\nx = solver(task)\n').warnings]
    for text in (api_reference(), warning.message):
        assert "last agent reply" not in text and "will be used" not in text, text
    assert "scores 0" in warning.message
    submit_doc = api_reference().split("submit(answer: str) -> None", 1)[1].split("\nboxed(", 1)[0]
    assert "scores 0" in submit_doc, submit_doc
