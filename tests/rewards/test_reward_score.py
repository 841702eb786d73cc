"""Format reward, total reward R = R_correct + lam * R_format, error records and batch scoring."""

from __future__ import annotations

import time

import pytest

from metaagent.data import Task
from metaagent.records import AgentTurn, CheckReport, Design, Execution, RewardRecord, RolloutTree
from metaagent.rewards import (
    RewardConfig,
    delivery_format,
    format_components,
    reward_metrics,
    score_execution,
    score_executions,
    score_tree,
    solution_format,
)

MATH = Task(id="m1", domain="math", question="What is 2 + 3?", answer="5", source="test")
CODE = Task(
    id="c1",
    domain="code",
    question="Add two numbers.",
    source="test",
    tests={"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]},
)
GOOD_PROGRAM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
HALF_PROGRAM = "```python\na, b = map(int, input().split())\nprint(3)\n```"  # passes the first test only


def turn(response: str, index: int = 0) -> AgentTurn:
    return AgentTurn(
        index=index,
        role="Solver",
        system_prompt="",
        messages=[],
        response=response,
        delivery=None,
        prompt_ids=[],
        response_ids=[],
        logprobs=None,
        finish_reason="stop",
        model="m",
    )


def execution(answer: str | None, responses=None, submitted: bool = True) -> Execution:
    """An execution that submitted ``answer``; by default its one agent delivered it (answer provenance:
    an answer no agent stated is refused, tests/rewards/test_provenance.py)."""
    if responses is None:
        responses = (f"ok <delivery>{answer}</delivery>" if answer else "ok <delivery>x</delivery>",)
    return Execution(
        index=0,
        status="ok",
        answer=answer,
        submitted=submitted,
        turns=[turn(r, i) for i, r in enumerate(responses)],
    )


# ---- format -------------------------------------------------------------------------------------------------------


def test_solution_format_per_domain():
    assert solution_format("math", "so \\boxed{5}") == 1.0
    assert solution_format("math", "the answer is 5") == 0.0
    assert solution_format("code", GOOD_PROGRAM) == 1.0
    assert solution_format("code", "print(1)") == 0.0
    assert solution_format("code", None) == 0.0
    with pytest.raises(ValueError, match="domain"):
        solution_format("poetry", "x")


def test_delivery_format_is_fraction_of_turns():
    turns = [
        turn("a <delivery>1</delivery>"),
        turn("no tags"),
        turn("<delivery>unclosed"),
        turn("<delivery>z</delivery>"),
    ]
    assert delivery_format(turns) == 0.5
    assert delivery_format([]) == 0.0


def test_format_is_mean_and_zero_without_submit():
    e = execution("\\boxed{5}", responses=("<delivery>1</delivery>", "none"))
    assert format_components("math", e) == {"solution_format": 1.0, "delivery_format": 0.5, "format": 0.75}
    e.submitted = False
    assert format_components("math", e)["format"] == 0.0


# ---- total reward -----------------------------------------------------------------------------------------------


def test_math_correct_total_and_components():
    record = score_execution(MATH, execution("Adding gives \\boxed{5}."))
    assert record.error is None
    assert (record.correct, record.format, record.total) == (1.0, 1.0, pytest.approx(1.4))
    assert record.components == {
        "solution_format": 1.0,
        "delivery_format": 1.0,
        "format": 1.0,
        "correct": 1.0,
    }
    assert record.details["math"]["status"] == "correct" and record.details["math"]["pred"] == "5"


def test_math_wrong_or_missing_answer_is_a_computed_zero():
    wrong = score_execution(MATH, execution("\\boxed{6}"))
    assert (wrong.error, wrong.correct, wrong.total) == (None, 0.0, pytest.approx(0.4))
    missing = score_execution(MATH, execution(None, submitted=False))
    assert (missing.error, missing.correct, missing.format, missing.total) == (None, 0.0, 0.0, 0.0)


def test_unboxed_answer_is_correct_but_loses_solution_format():
    record = score_execution(MATH, execution("The answer is 5."))
    assert record.correct == 1.0 and record.components["solution_format"] == 0.0
    assert record.total == pytest.approx(1.0 + 0.4 * 0.5)


def test_lambda_is_configurable():
    record = score_execution(MATH, execution("\\boxed{5}"), RewardConfig(lam=0.0))
    assert record.total == 1.0


def test_code_all_pass_and_pass_rate_variant():
    good = score_execution(CODE, execution(GOOD_PROGRAM))
    assert (good.correct, good.total) == (1.0, pytest.approx(1.4))
    assert good.details["code"]["passed"] == 2
    half = score_execution(CODE, execution(HALF_PROGRAM))
    assert half.correct == 0.0 and half.details["code"]["status"] == "wrong_answer"
    pass_rate = RewardConfig(domains={"code": {"correct": "pass_rate"}})
    rate = score_execution(CODE, execution(HALF_PROGRAM), pass_rate)
    assert rate.correct == 0.5 and rate.details["code"]["passed"] == 1


def test_code_without_program_is_zero():
    record = score_execution(CODE, execution("I would add them."))
    assert record.error is None and record.correct == 0.0 and record.details["code"]["status"] == "no_program"


def test_code_timeout_is_a_zero_not_an_error():
    loop = "```python\nwhile True:\n    pass\n```"
    record = score_execution(CODE, execution(loop), RewardConfig(domains={"code": {"time_limit_s": 0.5}}))
    assert record.error is None and record.correct == 0.0 and record.details["code"]["status"] == "timeout"


def test_call_based_task_uses_metadata_fn_name():
    task = Task(
        id="c2",
        domain="code",
        question="q",
        source="test",
        metadata={"fn_name": "twoSum"},
        tests=[{"input": "[1,2]\n3", "output": "[0, 1]", "testtype": "functional"}],
    )
    program = "```python\ndef twoSum(nums, t):\n    return [0, 1]\n```"
    assert score_execution(task, execution(program)).correct == 1.0


# ---- errors are recorded, never a silent zero -------------------------------------------------------------------


def test_checker_timeout_is_an_error_record(monkeypatch):
    # the reference itself cannot be verified in time: the verifier failed, not the answer (a verifier that
    # answers nothing is faked: a real 1 ms deadline is sometimes met by a warm helper)
    from metaagent.rewards import math as math_module

    monkeypatch.setattr(math_module, "_verify", lambda *a: {"ok": False, "timeout": True, "error": "too slow"})
    monkeypatch.setattr(math_module, "_GOLD_VERIFIES", {})
    symbolic = Task(id="m9", domain="math", question="Simplify sqrt(50).", answer="5\\sqrt{2}", source="test")
    quick = RewardConfig(domains={"math": {"timeout_s": 1.0}})
    record = score_execution(symbolic, execution("\\boxed{\\sqrt{2} \\cdot 5}"), quick)
    assert record.total is None and record.correct is None
    assert "timeout" in record.error and record.details["error_kind"] == "math_timeout"
    assert record.format == 1.0  # the parts that could be computed are kept


def test_missing_reference_is_an_error_record():
    adhoc = Task.coerce("What is 1 + 1?")
    record = score_execution(adhoc, execution("\\boxed{2}"))
    assert record.total is None and record.details["error_kind"] == "no_reference"


def test_malformed_tests_are_an_error_record():
    task = Task(id="c3", domain="code", question="q", source="test", tests={"inputs": ["1"], "outputs": []})
    record = score_execution(task, execution(GOOD_PROGRAM))
    assert record.total is None and record.details["error_kind"] == "tests_format"


def test_runner_failure_is_an_error_record(monkeypatch):
    from metaagent.execution import code_runner

    monkeypatch.setattr(code_runner.CaseLimits, "__init__", _broken_python_limits(code_runner.CaseLimits.__init__))
    record = score_execution(CODE, execution(GOOD_PROGRAM))
    assert record.total is None and record.details["error_kind"] == "code_runner"


def _broken_python_limits(original):
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        object.__setattr__(self, "python", "/nonexistent/python")

    return init


# ---- config ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lam": -1}, "lam"),
        ({"domains": {"code": {"correct": "most"}}}, r"reward\.domains\.code\.correct"),
        ({"domains": {"code": {"time_limit_s": 0}}}, r"reward\.domains\.code\.time_limit_s"),
        ({"domains": {"code": {"memory_mb": 8}}}, r"reward\.domains\.code\.memory_mb"),
        ({"domains": {"math": {"rel_tol": 0}}}, r"reward\.domains\.math\.rel_tol"),
        ({"domains": {"math": {"answer_fallbacks": ["(unclosed"]}}}, "not a valid regex"),
        ({"domains": {"math": {"answer_fallbacks": [r"answer: (\d+)"]}}}, "named group"),
        ({"domains": {"math": {"tolerance": 1}}}, r"unknown key\(s\) reward\.domains\.math\.tolerance"),
        ({"domains": {"poetry": {}}}, r"reward\.domains: unknown domain 'poetry'"),
        ({"domains": {"qa": {"x": 1}}}, "the qa domain has no settings of its own"),
    ],
)
def test_config_validation_names_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RewardConfig(**kwargs)


def test_a_domain_reads_its_own_settings_and_old_records_upgrade():
    """``reward.domains.math`` is the math domain's own section: its scorer reads it, the other domains' are
    untouched, and a recorded section with the old flat keys (``math_final_form``) loads as the new one."""
    from metaagent.domains.math import MathSettings
    from metaagent.rewards.score import upgrade_reward_section

    lenient = RewardConfig(domains={"math": {"final_form": "lenient"}})
    assert lenient.domain_settings("math") == MathSettings(final_form="lenient")
    assert lenient.domains["math"]["rel_tol"] == MathSettings().rel_tol  # recorded in full
    assert RewardConfig().domain_settings("math") == MathSettings() and lenient.domain_settings("qa") is None
    task = {"id": "t", "domain": "math", "question": "What is 35?", "answer": "35"}
    answer = "\\boxed{\\sqrt{1225}}"
    assert score_execution(task, execution(answer)).correct == 0.0
    assert score_execution(task, execution(answer), lenient).correct == 1.0
    old = {"lam": 0.4, "math_final_form": "lenient", "math_timeout_s": 2.0}
    assert RewardConfig(**upgrade_reward_section(old)).domain_settings("math") == MathSettings(
        final_form="lenient", timeout_s=2.0
    )


def test_score_executions_names_a_bad_worker_count():
    with pytest.raises(ValueError, match="max_workers must be a positive integer"):
        score_executions([(MATH, execution("\\boxed{4}"))], max_workers=0)


def test_config_from_dict():
    cfg = RewardConfig.from_dict({"lam": 0.2, "fence_languages": ["python"]})
    assert cfg.lam == 0.2 and cfg.fence_languages == ("python",)
    with pytest.raises(ValueError, match="unknown reward option"):
        RewardConfig.from_dict({"lambda": 0.2})


# ---- batches, trees, metrics -------------------------------------------------------------------------------------------


def test_score_executions_keeps_order_and_runs_concurrently():
    slow = "```python\nimport time\ntime.sleep(2.5)\na, b = map(int, input().split())\nprint(a + b)\n```"
    pairs = [(CODE, execution(slow)) for _ in range(4)] + [(MATH, execution("\\boxed{4}"))]
    start = time.monotonic()
    records = score_executions(pairs, RewardConfig(domains={"code": {"workers": 2}}), max_workers=4)
    elapsed = time.monotonic() - start
    assert [r.correct for r in records] == [1.0, 1.0, 1.0, 1.0, 0.0]
    # one at a time, the four programs sleep 10 s at least, however fast the machine; two workers need ~5 s,
    # so finishing under 10 s is only possible when they ran concurrently (load only makes it slower; the 5 s
    # between leaves a loaded machine room to start the programs)
    assert elapsed < 4 * 2.5


def test_score_executions_records_internal_errors():
    records = score_executions([(MATH, "not an execution")])  # type: ignore[list-item]
    assert records[0].total is None and records[0].details["error_kind"] == "internal"


def test_score_tree_fills_execution_rewards():
    design = Design(
        index=0,
        source="designer",
        sample=None,
        script="x",
        check=CheckReport(ok=True),
        executions=[execution("\\boxed{5}"), execution("\\boxed{7}")],
    )
    tree = RolloutTree(run_id="r", task=MATH.to_dict(), seed=0, config={}, models={}, designs=[design])
    records = score_tree(tree)
    assert [e.reward.correct for e in design.executions] == [1.0, 0.0]
    assert records[0] is design.executions[0].reward
    again = RolloutTree.from_json(tree.to_json())  # rewards survive the record format
    assert again.designs[0].executions[1].reward.total == pytest.approx(0.4)


def test_reward_metrics_counts_errors():
    records = [
        RewardRecord(
            total=1.4, correct=1.0, format=1.0, components={"solution_format": 1.0, "delivery_format": 1.0}
        ),
        RewardRecord(
            total=0.2, correct=0.0, format=0.5, components={"solution_format": 0.0, "delivery_format": 1.0}
        ),
        RewardRecord(
            total=None,
            correct=None,
            format=None,
            error="math check timeout",
            details={"error_kind": "math_timeout"},
        ),
    ]
    m = reward_metrics(records)
    assert m["reward/count"] == 3 and m["reward/errors"] == 1 and m["reward/errors/math_timeout"] == 1
    assert m["reward/error_rate"] == pytest.approx(1 / 3)
    assert m["reward/mean_total"] == pytest.approx(0.8) and m["reward/mean_correct"] == pytest.approx(0.5)
    assert m["reward/mean_delivery_format"] == 1.0


# ---- executions that never submitted (issue: no submit, no solution) -------------------------------------------


@pytest.mark.parametrize("status", ["error", "timeout", "limit", "ok"])
def test_a_script_that_never_submitted_scores_no_correctness(status):
    """The script crashed after an agent replied with the right answer: R_correct = 0, R_format = 0."""
    crashed = execution(r"The sum is \boxed{5}", responses=(r"<delivery>\boxed{5}</delivery>",), submitted=False)
    crashed.status = status
    record = score_execution(MATH, crashed)
    assert record.correct == 0.0 and record.format == 0.0 and record.total == 0.0
    assert record.details["unsubmitted"] == status
    assert crashed.answer == r"The sum is \boxed{5}"  # the last reply stays in the record for replay
    submitted = score_execution(MATH, execution(r"\boxed{5}", responses=(r"<delivery>\boxed{5}</delivery>",)))
    assert submitted.correct == 1.0


def test_unsubmitted_format_delivery_keeps_the_delivery_share():
    crashed = execution(r"\boxed{5}", responses=("<delivery>a</delivery>", "no tag"), submitted=False)
    crashed.status = "error"
    record = score_execution(MATH, crashed, RewardConfig(unsubmitted_format="delivery"))
    assert record.correct == 0.0 and record.format == pytest.approx(0.25)  # (0 + 1/2) / 2
    with pytest.raises(ValueError, match="unsubmitted_format"):
        RewardConfig(unsubmitted_format="last_reply")
