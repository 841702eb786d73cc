"""Reward integrity: nothing earns reward without solving the task.

One adversarial class per test (several answers each), through the public scorer (``score_execution``) and
through whole workflow executions (rollout engine + sandbox + scripted policies); then every bundled math task
with generated shortcut answers. The classes and their rules: :mod:`metaagent.rewards.shortcuts`.
"""

from __future__ import annotations

import time

import pytest

from metaagent.data import Task
from metaagent.data.bundled import load_bundled
from metaagent.policy import ScriptedPolicy
from metaagent.records import AgentTurn, Execution
from metaagent.rewards import RewardConfig, check_math, extract_answer, score_execution
from metaagent.rewards.math import find_boxed
from metaagent.rewards.shortcuts import SHORTCUT_CLASSES, copies_question
from metaagent.rollout.config import RolloutConfig
from metaagent.rollout.engine import RolloutEngine
from metaagent.rollout.metrics import rollout_metrics
from metaagent.workflow import SandboxPool

TASK = Task(id="m35", domain="math", question="What is 16 + 19?", answer="35", source="test")
STRICT, LENIENT = RewardConfig(), RewardConfig(domains={"math": {"final_form": "lenient"}})
HUGE_POWER = "2^{2^{2^{2^{2^{2^{2}}}}}}"

UNBOUNDED = ["\\infty", "-\\infty", "1e999", "10^{1000}", "nan", "\\aleph_0", "9" * 400]
UNEVALUATED = [  # equal to 35, none of them a number
    "\\sqrt{1225}", "\\sum_{k=1}^{5} 7", "\\int_0^{35} 1\\,dx", "\\frac{70}{2}", "70/2", "7!/144", "5 \\cdot 7",
    "16+19=35", "35 = 16 + 19", "2^{5} + 3",
]  # fmt: skip
COPIES = ["16 + 19", "16+19", "19 + 16", "(16)+(19)", "16 \\, + \\, 19", "$16 + 19$", "16 plus 19"]
INEXACT = ["35.00001", "35.0000001", "34.9999999", "3.50000001e1"]
STALLING = [HUGE_POWER, "10^{10^{10^{10^{10}}}}"]


def turn(response: str, index: int = 0) -> AgentTurn:
    return AgentTurn(
        index=index, role="Solver", system_prompt="", messages=[], response=response, delivery=None,
        prompt_ids=[], response_ids=[], logprobs=None, finish_reason="stop", model="m",
    )  # fmt: skip


def answered(text: str, *, turns: int = 1) -> Execution:
    reply = f"Done. <delivery>{text}</delivery>"
    return Execution(index=0, status="ok", answer=text, submitted=True, turns=[turn(reply, i) for i in range(turns)])


def scored(answer: str, config: RewardConfig = STRICT, task: Task = TASK):
    return score_execution(task, answered(answer), config)


# ---- the public scorer, one class per test -----------------------------------------------------------------------


def test_an_honest_answer_still_pays_in_full():
    for answer in ("\\boxed{35}", "The answer is 35.", "\\boxed{35 apples}", "\\boxed{x = 35}", "\\boxed{35.0}"):
        record = scored(answer)
        assert record.correct == 1.0 and record.details["shortcuts"] == [], answer


@pytest.mark.parametrize("config", [STRICT, LENIENT], ids=["strict", "lenient"])
@pytest.mark.parametrize("value", UNBOUNDED)
def test_unbounded_values_equal_no_reference(value, config):
    record = scored(f"\\boxed{{{value}}}", config)
    assert record.total is not None and record.correct == 0.0
    assert "unbounded" in record.details["shortcuts"] or value.startswith("10^") or value.startswith("9"), record
    # also against a symbolic reference (math-verify's numeric fallback is bounded too)
    pi = Task(id="pi", domain="math", question="Give pi.", answer="\\pi", source="test")
    assert scored(f"\\boxed{{{value}}}", config, pi).correct == 0.0


@pytest.mark.parametrize("expression", UNEVALUATED)
def test_an_expression_for_a_number_is_incorrect_in_strict_mode(expression):
    record = scored(f"\\boxed{{{expression}}}")
    assert record.total is not None and record.correct == 0.0
    assert record.details["math"]["method"] in ("final_form", "question_copy"), record.details
    # unboxed, after "The answer is", too
    assert scored(f"The answer is {expression}").correct == 0.0


def test_strict_is_the_default_and_lenient_keeps_symbolic_equivalence():
    assert RewardConfig().domain_settings("math").final_form == "strict"
    assert scored("\\boxed{\\sqrt{1225}}", LENIENT).correct == 1.0
    assert "non_final_form" in scored("\\boxed{\\sqrt{1225}}").details["shortcuts"]  # what lenient would pay


@pytest.mark.parametrize("config", [STRICT, LENIENT], ids=["strict", "lenient"])
@pytest.mark.parametrize("copy", COPIES)
def test_a_copy_of_the_question_is_incorrect_in_both_modes(copy, config):
    for answer in (f"\\boxed{{{copy}}}", f"The answer is {copy}", f"<delivery>\\boxed{{{copy}}}</delivery>"):
        record = scored(answer, config)
        assert record.correct == 0.0 and "question_copy" in record.details["shortcuts"], (answer, record.details)


def test_a_refused_answer_earns_no_format_share_unless_asked():
    # a copy in a box is well formatted: with the format share kept it would out-earn an unboxed honest try
    honest_wrong, copy = scored("\\boxed{36}"), scored("\\boxed{16 + 19}")
    assert honest_wrong.correct == copy.correct == 0.0 and honest_wrong.total > 0.0
    assert (copy.total, copy.format) == (0.0, 0.0) and copy.components["delivery_format"] > 0
    for answer in ("\\boxed{\\sqrt{1225}}", "\\boxed{35.00001}", "\\boxed{\\infty}"):
        assert scored(answer).total == 0.0, answer
    keep = RewardConfig(shortcut_format="keep")  # Eq. 10 as written: the share any wrong answer gets
    assert scored("\\boxed{16 + 19}", keep).total == pytest.approx(honest_wrong.total)
    with pytest.raises(Exception, match="shortcut_format"):
        RewardConfig(shortcut_format="sometimes")


def test_copy_detection_does_not_refuse_numbers_found_in_the_question():
    assert not copies_question("-5", "What is 0 - 5?")
    assert not copies_question("1/2", "What is 1/2 times 1?")
    assert not copies_question("x = 5", "Solve for x: 9x + 12 = 57.")
    assert copies_question("9x + 12 = 57", "Solve for x: 9x + 12 = 57.")
    assert copies_question("48 \\div 6", "What is 48 / 6?")
    assert copies_question("\\frac{48}{6}", "What is 48 / 6?")


@pytest.mark.parametrize("config", [STRICT, LENIENT], ids=["strict", "lenient"])
@pytest.mark.parametrize("near", INEXACT)
def test_integer_references_are_compared_exactly(near, config):
    record = scored(f"\\boxed{{{near}}}", config)
    assert record.correct == 0.0 and "inexact_number" in record.details["shortcuts"], record.details
    fraction = Task(id="f", domain="math", question="What is 1/3 of 1?", answer="1/3", source="test")
    assert scored("\\boxed{0.3334}", config, fraction).correct == 0.0
    assert scored("\\boxed{0.333333}", config, fraction).correct == 1.0  # correctly rounded, 6 digits


@pytest.mark.parametrize("answer", STALLING)
def test_a_stalling_answer_is_incorrect_never_dropped(answer):
    for config in (RewardConfig(domains={"math": {"timeout_s": 1.0}}), RewardConfig(domains={"math": {"timeout_s": 1.0, "final_form": "lenient"}})):
        record = scored(f"\\boxed{{{answer}}}", config)
        assert record.error is None and record.total is not None and record.correct == 0.0, record


def test_extraction_is_linear_and_capped():
    # 40,000 unclosed boxes: the quadratic brace scan this replaced took minutes per score
    attacks = [
        "\\boxed{" * 40_000,
        "\\boxed{" * 40_000 + "\\boxed{35}",
        "{" * 200_000 + "\\boxed{35}",
        "\\boxed " * 100_000,
        " " * 100_000 + "abcd" + "1" * 100_000,
        "<delivery>" * 100_000,
    ]
    for text in attacks:
        start = time.monotonic()
        extract_answer(text)
        find_boxed(text)
        scored(text)
        assert time.monotonic() - start < 10.0, text[:30]
    assert extract_answer("\\boxed{" * 40_000 + "\\boxed{35}") == "35"


def test_no_agent_runs_scores_nothing():
    for answer in ("\\boxed{35}", "35"):
        record = score_execution(TASK, answered(answer, turns=0))
        assert (record.total, record.correct, record.format) == (0.0, 0.0, 0.0)
        assert "no_agent_runs" in record.details["shortcuts"]
    code = Task(id="c", domain="code", question="Print 1.", source="test", tests={"inputs": [""], "outputs": ["1\n"]})
    record = score_execution(code, answered("```python\nprint(1)\n```", turns=0))
    assert (record.total, record.correct, record.format) == (0.0, 0.0, 0.0)


def test_a_script_failing_before_its_first_call_is_no_shortcut():
    # it earns nothing either way; counting it as a shortcut would make broken scripts read as reward hacking
    failed = Execution(index=0, status="error", answer=None, submitted=False, turns=[])
    record = score_execution(TASK, failed)
    assert (record.total, record.correct, record.format) == (0.0, 0.0, 0.0)
    assert record.details["shortcuts"] == []


def test_an_empty_delivery_earns_nothing():
    for empty in ("<delivery></delivery>", "<delivery>   </delivery>", "<delivery>\n</delivery>"):
        reply = f"\\boxed{{35}} {empty}"  # the agent states the answer, outside its (empty) delivery block
        execution = Execution(index=0, status="ok", answer="\\boxed{35}", submitted=True, turns=[turn(reply)])
        record = score_execution(TASK, execution)
        assert record.components["delivery_format"] == 0.0
        assert record.format == 0.5 and "empty_delivery" in record.details["shortcuts"]


def test_every_class_has_a_counter():
    from metaagent.rewards import reward_metrics

    records = [scored("\\boxed{16 + 19}"), score_execution(TASK, answered("\\boxed{35}", turns=0))]
    metrics = reward_metrics(records)
    assert {f"reward/shortcut/{name}" for name in SHORTCUT_CLASSES} <= set(metrics)
    assert metrics["reward/shortcut/question_copy"] == 1.0 and metrics["reward/no_agent_runs"] == 1.0
    assert metrics["reward/shortcut/unbounded"] == 0.0


# ---- whole workflow executions ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        p.warm()
        yield p


def fenced(script: str) -> str:
    return f"The workflow:\n```python\n{script}\n```"


def run_team(pool, executor_reply: str, script: str | None = None, config: RewardConfig = STRICT):
    """One task, two executions of ``script`` (default: the single-solver template) by an executor that always
    replies ``executor_reply``; returns the executions and the step's metrics."""
    designer = None if script is None else ScriptedPolicy(lambda request: fenced(script))
    cfg = RolloutConfig(m_designs=1, n_executions=2, frozen_designer=None if script else "single_math")
    engine = RolloutEngine(designer, ScriptedPolicy(lambda request: executor_reply), cfg, pool=pool, reward_config=config)
    trees = engine.rollout([TASK], step=0, seed=0)
    executions = [e for _, e in trees[0].executions()]
    return executions, rollout_metrics(trees)


@pytest.mark.parametrize(
    ("reply", "shortcut"),
    [
        ("<delivery>\\boxed{\\infty}</delivery>", "unbounded"),
        ("<delivery>\\boxed{16 + 19}</delivery>", "question_copy"),
        ("<delivery>The answer is 19 + 16</delivery>", "question_copy"),
        ("<delivery>\\boxed{\\sqrt{1225}}</delivery>", "non_final_form"),
        ("<delivery>\\boxed{35.00001}</delivery>", "inexact_number"),
    ],
)
def test_shortcut_replies_in_a_workflow_pay_nothing_and_are_counted(pool, reply, shortcut):
    executions, metrics = run_team(pool, reply)
    assert [e.status for e in executions] == ["ok", "ok"]
    assert all((e.reward.total, e.reward.correct, e.reward.format) == (0.0, 0.0, 0.0) for e in executions)
    assert metrics[f"reward/shortcut/{shortcut}"] == 2.0
    honest, honest_metrics = run_team(pool, "<delivery>\\boxed{35}</delivery>")
    assert all(e.reward.correct == 1.0 for e in honest)
    assert all(v == 0.0 for k, v in honest_metrics.items() if k.startswith("reward/shortcut/"))


def test_a_stalling_reply_in_a_workflow_is_incorrect(pool):
    config = RewardConfig(domains={"math": {"timeout_s": 1.0, "final_form": "lenient"}})
    executions, metrics = run_team(pool, f"<delivery>\\boxed{{{HUGE_POWER}}}</delivery>", config=config)
    assert all(e.reward.error is None and e.reward.correct == 0.0 for e in executions)
    assert metrics["rollout/reward_errors"] == 0 and metrics["reward/shortcut/verifier_timeout"] == 2.0


NO_TEAM = """solver = Agent("MathSolver", "You solve math problems step by step.")
if len(task) < 0:
    submit(solver(task))
words = task.replace("?", "").split()
submit("\\\\boxed{" + str(int(words[2]) + int(words[4])) + "}")
"""


def test_a_team_that_never_runs_earns_nothing(pool):
    # the script passes the checker (it defines and calls an agent) but the call is dead code: the script
    # computes the answer itself from the question string and submits it
    executions, metrics = run_team(pool, "<delivery>\\boxed{35}</delivery>", script=NO_TEAM)
    assert [e.answer for e in executions] == ["\\boxed{35}", "\\boxed{35}"] and not any(e.turns for e in executions)
    assert all((e.reward.total, e.reward.correct, e.reward.format) == (0.0, 0.0, 0.0) for e in executions)
    assert metrics["reward/no_agent_runs"] == 2.0


def test_an_empty_delivery_in_a_workflow_earns_no_delivery_credit(pool):
    executions, metrics = run_team(pool, "\\boxed{35} <delivery></delivery>")
    assert all(e.reward.components["delivery_format"] == 0.0 for e in executions)
    assert metrics["reward/shortcut/empty_delivery"] == 2.0


# ---- the bundled math set: no shortcut scores on any task ------------------------------------------------------


def _shortcut_answers(task: Task) -> dict[str, list[str]]:
    expression = str(task.metadata.get("expression") or "")
    gold = task.answer or ""
    answers = {
        "unbounded": ["\\infty", "1e999", "nan"],
        "question_copy": [expression, f"({expression})"],
        "restatement": [f"{expression} = {gold}"],
    }
    if "/" not in gold:  # integer references: near misses and evaluated-looking expressions
        value = int(gold)
        answers["inexact_number"] = [f"{value}.00001", f"{value - 1}.9999999"]
        answers["non_final_form"] = [f"\\sqrt{{{value * value}}}", f"{value + 1} - 1", f"\\frac{{{2 * value}}}{{2}}"]
    else:
        num, den = (int(x) for x in gold.split("/"))
        answers["inexact_number"] = [f"{num / den + 1e-5:.5f}", f"{num / den:.2f}1"]
        answers["non_final_form"] = [f"{2 * num}/{2 * den}", f"\\frac{{{3 * num}}}{{{3 * den}}}"]
    return answers


@pytest.mark.slow
def test_no_shortcut_scores_on_any_bundled_math_task():
    tasks = load_bundled(domain="math")
    assert len(tasks) == 225
    paid: dict[str, list[str]] = {}
    for task in tasks:
        for cls, answers in _shortcut_answers(task).items():
            for answer in answers:
                check = check_math(answer, task.answer, question=task.question, final_form="strict")
                if check.correct or not check.computed:
                    paid.setdefault(cls, []).append(f"{task.id}: {answer!r} -> {check.status}")
                # a copy of the question pays in lenient mode neither
                if cls == "question_copy":
                    lenient = check_math(answer, task.answer, question=task.question, final_form="lenient")
                    if lenient.correct:
                        paid.setdefault("question_copy/lenient", []).append(f"{task.id}: {answer!r}")
    assert not paid, {cls: (len(rows), rows[:3]) for cls, rows in paid.items()}
