"""Math answer extraction and equivalence (table-driven), under threads and processes, with timeouts."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest
from reward_math_cases import CASES, LENIENT_ONLY, check_status

from metaagent.rewards import RewardError, check_math, extract_answer, math_equal
from metaagent.rewards import math as math_module
from metaagent.rewards.math import find_boxed, normalize_answer

# ---- extraction ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so the answer is \\boxed{5}.", "5"),
        ("first \\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("nested \\boxed{\\frac{\\sqrt{2}}{2}} here", "\\frac{\\sqrt{2}}{2}"),
        ("a set \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\fbox{42}", "42"),
        ("\\boxed 7 and done", "7"),
        ("\\boxed{$x = 3$}", "x = 3"),
        ("The answer is 5.", "5"),
        ("Final answer: $x = 3$.", "x = 3"),
        ("The final answer is 3.5 because it is", "3.5"),
        ("**Final Answer:** \\frac{3}{4}", "\\frac{3}{4}"),
        ("42", "42"),
        ("  x = 3 ", "x = 3"),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text", [None, "", "I think it is probably something", "unclosed \\boxed{5"])
def test_extract_answer_none(text):
    assert extract_answer(text) is None


def test_extract_answer_custom_fallbacks():
    text = "ANSWER => 17"
    assert extract_answer(text) is None
    assert extract_answer(text, fallbacks=(r"ANSWER =>\s*(?P<answer>\S+)",)) == "17"
    assert extract_answer("the answer is 3", fallbacks=()) is None


def test_find_boxed_prefers_last_complete_box():
    assert find_boxed("\\boxed{1} and \\boxed{2") == "1"
    assert find_boxed("no box") is None


def test_normalize_answer_variants():
    assert normalize_answer("\\left( 1,\\, 2 \\right)") == ("( 1, 2 )", False)
    assert normalize_answer("\\dfrac{1}{2}") == ("\\frac{1}{2}", False)
    assert normalize_answer("50\\%") == ("50", True)
    assert normalize_answer("30^{\\circ}") == ("30", False)
    assert normalize_answer("1,000,000") == ("1000000", False)
    assert normalize_answer("1, 2") == ("1, 2", False)  # a list, not a thousands separator


# ---- equivalence table ----------------------------------------------------------------------------------------


def test_table_is_large_and_covers_both_verdicts():
    assert len(CASES) >= 60
    statuses = [c[2] for c in CASES]
    assert statuses.count("correct") >= 30 and statuses.count("incorrect") >= 15


@pytest.mark.parametrize("final_form", ["strict", "lenient"])
@pytest.mark.parametrize(("pred", "gold", "expected"), CASES, ids=[f"{c[0]!r}~{c[1]!r}" for c in CASES])
def test_math_table(pred, gold, expected, final_form):
    check = check_math(pred, gold, final_form=final_form)
    assert check.status == expected, check
    assert check.computed


@pytest.mark.parametrize(("pred", "gold"), LENIENT_ONLY, ids=[f"{c[0]!r}~{c[1]!r}" for c in LENIENT_ONLY])
def test_an_expression_for_a_number_pays_only_in_lenient_mode(pred, gold):
    strict = check_math(pred, gold, final_form="strict")
    assert (strict.status, strict.method, strict.shortcut) == ("incorrect", "final_form", "non_final_form")
    assert check_math(pred, gold, final_form="lenient").status == "correct"


def test_unknown_final_form_is_refused():
    with pytest.raises(ValueError, match="final_form must be one of"):
        check_math("1", "1", final_form="loose")


def test_math_table_same_under_threads():
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(check_status, CASES))
    assert statuses == [c[2] for c in CASES]


def test_math_table_same_under_process_pool():
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
        statuses = list(pool.map(check_status, CASES, chunksize=8))
    assert statuses == [c[2] for c in CASES]


def test_works_inside_daemonic_multiprocessing_pool():
    """multiprocessing.Pool workers are daemonic and may not start multiprocessing children; ours are subprocesses."""
    symbolic = [c for c in CASES if c[0] == "2\\sqrt{2}" and c[1] == "\\sqrt{8}"]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.map(check_status, symbolic) == ["correct"]


# ---- timeouts and errors ----------------------------------------------------------------------------------------

HUGE_POWER = "2^{2^{2^{2^{2^{2^{2}}}}}}"


def test_a_prediction_that_stalls_the_verifier_is_incorrect_not_dropped():
    # lenient mode hands the expression to math-verify, which cannot finish it: the prediction caused the
    # deadline (the reference alone verifies), so it is a wrong answer, counted, never an abstention
    check = check_math(HUGE_POWER, "5", timeout_s=1.0, final_form="lenient")
    assert (check.status, check.shortcut) == ("incorrect", "verifier_timeout")
    assert check.computed and 0.9 <= check.elapsed_s < 10
    # strict mode refuses the expression outright; its lenient re-check (for the counter) stalls too
    strict = check_math(HUGE_POWER, "5", timeout_s=1.0, final_form="strict")
    assert (strict.status, strict.shortcut) == ("incorrect", "verifier_timeout")
    # the killed helper is replaced: the next check works
    assert check_math("\\sqrt{8}", "2\\sqrt{2}").status == "correct"


def test_timeout_of_the_reference_itself_is_a_status_not_false(monkeypatch):
    # a verifier that answers nothing in time: the reference alone cannot be verified either, so the verifier
    # failed (a status, never a verdict). Faked, because a real deadline short enough to always miss it does
    # not exist on every machine (a warm helper answered a 1 ms deadline on CI).
    monkeypatch.setattr(math_module, "_verify", lambda *a: {"ok": False, "timeout": True, "error": "too slow"})
    monkeypatch.setattr(math_module, "_GOLD_VERIFIES", {})
    check = check_math("3\\sqrt{2}", "\\sqrt{18}", timeout_s=1.0)
    assert check.status == "timeout"
    assert not check.computed and not check.correct
    # the same stall with a reference the verifier decides alone is the prediction's fault
    monkeypatch.setattr(math_module, "_GOLD_VERIFIES", {("\\sqrt{18}",): True})
    assert check_math("3\\sqrt{2}", "\\sqrt{18}", timeout_s=1.0).status == "incorrect"


def test_timeout_in_a_thread():
    with ThreadPoolExecutor(max_workers=1) as pool:
        check = pool.submit(check_math, HUGE_POWER, "5", timeout_s=1.0, final_form="lenient").result()
    assert (check.status, check.shortcut) == ("incorrect", "verifier_timeout")


def test_math_equal_raises_when_no_verdict(monkeypatch):
    assert math_equal("1/2", "0.5") is True
    assert math_equal("3", "4") is False
    assert math_equal(None, "4") is False
    assert math_equal(HUGE_POWER, "5", timeout_s=1.0, final_form="lenient") is False  # the prediction's fault
    with monkeypatch.context() as m:  # a verifier that answers nothing (not a real 1 ms deadline: see above)
        m.setattr(math_module, "_verify", lambda *a: {"ok": False, "timeout": True, "error": "too slow"})
        m.setattr(math_module, "_GOLD_VERIFIES", {})
        with pytest.raises(RewardError, match="timeout"):
            math_equal("2\\sqrt{5}", "\\sqrt{20}", timeout_s=1.0)
    with pytest.raises(RewardError, match="no gold answer"):
        math_equal("3", "")


def test_tolerance_is_configurable_for_decimal_references_only():
    assert check_math("1.5001", "1.5").status == "incorrect"
    assert check_math("1.5001", "1.5", rel_tol=1e-3).status == "correct"
    assert check_math("1.0001", "1", rel_tol=1e-3).status == "incorrect"  # an integer reference is exact
    assert check_math("3.1416", "\\pi", rel_tol=1e-4).status == "correct"
    assert check_math("3.1416", "\\pi").status == "incorrect"


def test_a_box_around_the_whole_answer_is_formatting_not_an_expression():
    # check_math is public: a caller that passes the boxed text itself gets the same verdict as for its content
    assert check_math("\\boxed{2249688}", "2249688").status == "correct"
    assert check_math("$\\boxed{\\boxed{35}}$", "35").status == "correct"
    # the strict rule still reads what is inside: an expression stays an expression, two boxes stay two
    assert check_math("\\boxed{16+19}", "35", final_form="strict").status == "incorrect"
    assert check_math("\\boxed{1}+\\boxed{2}", "3", final_form="strict").status == "incorrect"


# ---- the library default: symbolic equivalence; the reward's strict rule is an explicit option ----------------

#: (prediction, reference): equal by math-verify's symbolic equivalence (issue 64: the regression set)
SYMBOLIC_EQUAL = [
    ("\\pi", "3.14159265358979"),
    ("\\sqrt{3}", "1.7320508075688772"),
    ("\\binom{5}{2}", "10"),
    ("5!", "120"),
    ("\\log_2 8", "3"),
]


@pytest.mark.parametrize(("pred", "gold"), SYMBOLIC_EQUAL + [(g, p) for p, g in SYMBOLIC_EQUAL])
def test_math_equal_keeps_symbolic_equivalence_by_default(pred, gold):
    assert math_equal(pred, gold) is True
    assert check_math(pred, gold).status == "correct"


def test_math_equal_is_symbolic_outside_the_main_thread():
    # math-verify's own signal timeouts would fail here; they are disabled and the helper is killed instead
    with ThreadPoolExecutor(max_workers=2) as pool:
        verdicts = list(pool.map(lambda pair: math_equal(*pair), SYMBOLIC_EQUAL))
    assert verdicts == [True] * len(SYMBOLIC_EQUAL)


@pytest.mark.parametrize(("pred", "gold"), [(p, g) for p, g in SYMBOLIC_EQUAL if g[0].isdigit()])
def test_the_strict_rule_is_explicit_and_refuses_expressions_for_a_number(pred, gold):
    check = check_math(pred, gold, final_form="strict")
    assert (check.status, check.method) == ("incorrect", "final_form")
    assert math_equal(pred, gold, final_form="strict") is False


def test_the_reward_refuses_unevaluated_literals_and_question_copies():
    # the math domain's scorer passes reward.domains.math.final_form (strict by default) and the task's question
    from metaagent.records import AgentTurn, Execution
    from metaagent.rewards import RewardConfig, score_execution

    task = {"id": "t", "domain": "math", "question": "What is 16 + 19?", "answer": "35"}

    def scored(answer: str, **math) -> tuple[float, list[str]]:
        turn = AgentTurn(0, "Solver", "s", [], answer, None, [], [], None, "stop", "m")
        record = score_execution(task, Execution(index=0, status="ok", answer=answer, submitted=True,
                                                 turns=[turn]), RewardConfig(domains={"math": math}))  # fmt: skip
        return record.correct, record.details["shortcuts"]

    assert scored("\\boxed{35}") == (1.0, [])
    assert scored("\\boxed{\\sqrt{1225}}") == (0.0, ["non_final_form"])
    assert scored("\\boxed{16 + 19}") == (0.0, ["question_copy"])
    assert scored("\\boxed{16 + 19}", final_form="lenient") == (0.0, ["question_copy"])
    assert scored("\\boxed{\\sqrt{1225}}", final_form="lenient") == (1.0, [])
    # the library function on the same pair: symbolic unless asked otherwise
    assert math_equal("\\sqrt{1225}", "35") is True
    assert math_equal("16 + 19", "35", question="What is 16 + 19?") is False
