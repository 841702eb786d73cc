"""The fair baselines of issue 61: ``sa@k`` (majority vote / first program passing the public tests),
``sa@auto`` (k from auto's executor calls), ``fixed:pot``, ``best-per-domain`` (chosen on the validation
split,
never the test split), the compute columns, and the across-seed interval. Hand-made trees and a scripted
model: nothing here depends on what a model samples."""

from __future__ import annotations

import json
import math

import pytest

from metaagent.data import Task, load_bundled
from metaagent.eval import EvalError, Evaluation, make_config, parse_method, score_task
from metaagent.eval.analysis import across_seeds
from metaagent.eval.methods import sa_at_k_info
from metaagent.eval.metrics import maj_at_k, seed_interval, t_quantile
from metaagent.eval.report import render_table
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.records import AgentTurn, CheckReport, Design, Execution, RewardRecord, RolloutTree
from metaagent.rewards.selection import (
    SELECT_MAJORITY,
    SELECT_PUBLIC_TESTS,
    choose,
    majority_index,
    selection_rule,
)
from metaagent.rollout.config import RolloutConfig
from metaagent.rollout.engine import RolloutEngine
from metaagent.workflow import SandboxPool, check_script, load_templates

MATH_TASK = Task("m1", "math", "What is 1 + 2?", answer="3")
CODE_TASK = Task(
    "c1",
    "code",
    "Read an integer and print its double.",
    tests={"inputs": ["2\n", "5\n", "-1\n"], "outputs": ["4\n", "10\n", "-2\n"]},
    metadata={"public_tests": {"inputs": ["2\n"], "outputs": ["4\n"]}},
)
TEMPLATES = load_templates()


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


def _turn(tokens: int) -> AgentTurn:
    return AgentTurn(
        0, "Assistant", "sys", [], "r", "r", [1, 2], list(range(1, tokens + 1)), [-1.0] * tokens, "stop", "m"
    )


def _tree(task: Task, answers: list[str | None], correct: list[float | None], k: int) -> RolloutTree:
    """One frozen sa design with one execution per answer (execution j generates j + 1 tokens), as an sa@k
    record: the eval info sa@k's rollout writes (:func:`sa_at_k_info`)."""
    execs = [
        Execution(
            j,
            "ok",
            answer=a,
            turns=[_turn(j + 1)],
            reward=RewardRecord(c, c, 0.0)
            if c is not None
            else RewardRecord(None, None, None, error="checker down"),
        )
        for j, (a, c) in enumerate(zip(answers, correct))
    ]
    design = Design(0, "frozen:sa", None, "submit(1)", CheckReport(True), executions=execs)
    tree = RolloutTree("r", task.to_dict(), 0, {}, {}, designs=[design])
    tree.config = {"eval": {"method": f"sa@{k}", "n": len(answers) // k, **sa_at_k_info(tree, task, k)}}
    return tree


# ---- sa@k -------------------------------------------------------------------------------------------------


def test_sa_at_k_specs_parse_and_bad_ones_say_how():
    assert parse_method("sa@4", TEMPLATES).k == 4
    auto = parse_method("sa@auto", TEMPLATES)
    assert (auto.k, auto.match, auto.runs) == (None, "auto", False)
    assert parse_method("sa@=auto", TEMPLATES).match == "auto"
    assert parse_method("sa@=fixed:debate", TEMPLATES).match == "fixed:debate"
    assert auto.with_k(3).name == "sa@3" and auto.with_k(3).runs
    for bad in ("sa@0", "sa@", "sa@x", "sa@=sa@2"):
        with pytest.raises(EvalError, match="sa@"):
            parse_method(bad, TEMPLATES)


def test_majority_index_is_maj_at_k_choice():
    assert majority_index(["5", "3", "3"]) == 1  # the most frequent answer's first sample
    assert majority_index(["5", None, "7"]) == 0  # tie: the answer seen first
    assert majority_index([None, None]) is None
    assert maj_at_k(["5", "3", "3"], [0.0, 1.0, 1.0]) == 1.0 and maj_at_k([None], [1.0]) == 0.0
    assert choose(SELECT_MAJORITY, [None, None]) == (0, None)  # no vote: the first sample
    assert choose(SELECT_PUBLIC_TESTS, [False, True, True]) == (1, None)
    assert choose(SELECT_PUBLIC_TESTS, [False, False]) == (0, None)
    assert choose(SELECT_PUBLIC_TESTS, [False, None, True])[1] is not None  # a runner failure before a pass
    with pytest.raises(ValueError, match="unknown selection rule"):
        choose("best", [1])


def test_sa_at_k_votes_on_the_domain_key_and_sums_the_compute():
    answers = ["\\boxed{5}", "\\boxed{3}", "\\boxed{ 3 }", "\\boxed{5}", None, "\\boxed{7}"]
    tree = _tree(MATH_TASK, answers, [0.0, 1.0, 1.0, 0.0, 0.0, 0.0], k=3)
    assert tree.config["eval"]["select"] == SELECT_MAJORITY == selection_rule(MATH_TASK)
    s = score_task(tree, [1, 2])
    # group 1 votes 3 (two of three, spaces normalised by math's answer key): correct; group 2: 5 vs 7 tie ->
    # 5
    assert (s.samples, s.n, s.c) == (2, 2, 1) and s.avg[2] == 0.5
    assert s.agent_calls == 6 and s.tokens == sum(range(1, 7))  # each sample costs its k executions


def test_sa_at_k_reward_error_of_the_chosen_sample_is_an_error_not_a_zero():
    tree = _tree(MATH_TASK, ["\\boxed{4}", "\\boxed{4}", "\\boxed{3}"], [None, None, 1.0], k=3)
    s = score_task(tree, [1])
    assert (s.samples, s.n, s.reward_errors) == (1, 0, 1) and s.avg[1] is None


def test_sa_at_k_code_keeps_the_first_program_passing_the_public_tests_never_the_hidden():
    wrong = "```python\nprint(0)\n```"
    public_only = "```python\nn = int(input())\nprint(4 if n == 2 else 0)\n```"  # passes public, fails hidden
    right = "```python\nprint(2 * int(input()))\n```"
    # hidden-test correctness as the reward would record it: only `right` passes them
    tree = _tree(CODE_TASK, [wrong, public_only, right], [0.0, 0.0, 1.0], k=3)
    info = tree.config["eval"]
    assert info["select"] == SELECT_PUBLIC_TESTS and info["public_passed"] == [False, True, True]
    s = score_task(tree, [1])
    assert s.c == 0  # the public-test filter keeps public_only (a hidden-test oracle would have kept `right`)
    none_pass = _tree(CODE_TASK, [wrong, wrong], [0.0, 0.0], k=2)
    assert score_task(none_pass, [1]).samples == 1  # none passes: the first program, scored as it is


def test_sa_at_k_public_test_runner_failure_is_counted_as_an_error():
    tree = _tree(CODE_TASK, ["a", "b"], [0.0, 1.0], k=2)
    tree.config["eval"]["public_passed"] = [None, True]
    s = score_task(tree, [1])
    assert (s.n, s.reward_errors) == (0, 1)


def test_code_without_public_tests_votes_on_the_program_text():
    task = Task("c2", "code", "Print 1.", tests={"inputs": [""], "outputs": ["1\n"]})
    assert selection_rule(task) == SELECT_MAJORITY


# ---- fixed:pot --------------------------------------------------------------------------------------------


def test_pot_template_passes_the_checker():
    pot = next(t for t in TEMPLATES if t.name == "pot")
    assert pot.domains == ("math",) and check_script(pot.source).ok


def test_pot_submits_the_last_printed_line_boxed(pool):
    def reply(request: ChatRequest) -> str:
        return "<delivery>```python\nprint('working...')\nprint(1 + 2)\n```</delivery>"

    policy = ScriptedPolicy(reply)
    engine = RolloutEngine(None, policy, RolloutConfig(n_executions=2, frozen_designer="pot"), pool=pool)
    (tree,) = engine.rollout([MATH_TASK], mode="eval")
    executions = tree.designs[0].executions
    assert [e.answer for e in executions] == ["\\boxed{3}", "\\boxed{3}"]
    assert all(e.reward.correct == 1.0 and len(e.turns) == 1 for e in executions)  # one agent, no second one


def test_frozen_sa_designer_runs_each_domain_s_single_agent_script(pool):
    seen = []

    def reply(request: ChatRequest) -> str:
        seen.append(request.messages[0]["content"])
        return "<delivery>\\boxed{3}</delivery>"

    engine = RolloutEngine(
        None, ScriptedPolicy(reply), RolloutConfig(n_executions=1, frozen_designer="sa"), pool=pool
    )
    trees = engine.rollout([MATH_TASK, CODE_TASK], mode="eval")
    assert [t.designs[0].source for t in trees] == ["frozen:sa", "frozen:sa"]
    assert any("boxed" in s for s in seen) and any("Python program" in s for s in seen)


# ---- the harness: sa@auto, best-per-domain, compute columns ----------------------------------------------

VAL = [t for t in load_bundled("val") if t.domain == "math"][:2]
TEST = [t for t in load_bundled("test") if t.domain == "math"][:2]
TEAM = (
    'a = Agent("MathSolver", "Solve it. Put the answer in \\\\boxed{}.")\n'
    'b = Agent("MathChecker", "Check it. Put the answer in \\\\boxed{}.")\n'
    "submit(b(a(task)))\n"
)


def reply(request: ChatRequest) -> str:
    """Designer: a two-agent team (2 executor calls a sample). Agents: ``sa``'s prompt knows the validation
    answers, fixed:single_math's prompt the test answers; everything else answers 0."""
    if request.role == "designer":
        return f"```python\n{TEAM}```"
    text = "\n".join(m["content"] for m in request.messages)
    known = VAL if "Answer the question." in text else TEST if "step by step" in text else []
    for task in known:
        if task.question in text:
            return f"<delivery>\\boxed{{{task.answer}}}</delivery>"
    return "<delivery>\\boxed{0}</delivery>"


def _run(out, pool, **kw):
    values = dict(
        models=["scripted"], benchmarks=["bundled:test/math"], limit=2, n=2, out=str(out), bootstrap=200,
        concurrency=2, html=False,
    )  # fmt: skip
    values.update(kw)
    policy = ScriptedPolicy(reply, model_id="scripted")
    return Evaluation(make_config(**values), policies={"scripted": policy}, pool=pool).run()


def test_best_per_domain_chooses_on_validation_and_scores_on_test(tmp_path, pool):
    out = tmp_path / "res"
    results = _run(out, pool, methods=["sa", "fixed:single_math", "best-per-domain"])
    entries = results["cells"]["scripted"]["benchmarks"]["bundled:test/math"]
    best = entries["best-per-domain"]
    # sa is right on val and wrong on test; single_math the other way round: chosen on test it would be 100
    assert best["selection"]["math"]["chosen"] == "sa" and best["selection_split"] == "val"
    assert best["selection"]["math"]["val"] == {"sa": 1.0, "fixed:single_math": 0.0}
    assert entries["fixed:single_math"]["metrics"]["avg@2"]["mean"] == 1.0
    assert best["metrics"]["avg@2"]["mean"] == entries["sa"]["metrics"]["avg@2"]["mean"] == 0.0
    assert best["complete"] and best["tasks"] == 2
    assert (out / "rollouts" / "e=scripted" / "bundled_val_math" / "sa.jsonl").is_file()  # selection records
    table = (out / "table.md").read_text()
    assert "## best-per-domain: the candidate chosen per domain on split `val`" in table
    assert "| scripted | bundled:test/math | math | sa | 2 | sa 100.0, fixed:single_math 0.0 |" in table
    again = json.loads((out / "results.json").read_text())
    assert again["cells"]["scripted"]["benchmarks"]["bundled:test/math"]["best-per-domain"]["selection"]


def test_best_per_domain_on_a_seeded_carve_out_of_the_train_split(tmp_path, pool):
    out = tmp_path / "res"
    results = _run(out, pool, methods=["sa", "best-per-domain"], selection_split="train~3")
    best = results["cells"]["scripted"]["benchmarks"]["bundled:test/math"]["best-per-domain"]
    assert best["selection"]["math"]["val_tasks"] == 3 and best["selection_split"] == "train~3"
    (records,) = (out / "rollouts" / "e=scripted").glob("bundled_train_3_math/sa.jsonl")
    from metaagent.records import read_trees
    from metaagent.seeding import derive_seed

    ids = [t.task_id for t in read_trees(records)[0]]
    train = [t.id for t in load_bundled("train") if t.domain == "math"]
    assert sorted(ids) == sorted(sorted(train, key=lambda i: derive_seed(0, "selection", i))[:3])
    with pytest.raises(EvalError, match="carve-out"):
        _run(tmp_path / "bad", pool, methods=["sa", "best-per-domain"], selection_split="train~0")


def test_best_per_domain_refuses_to_choose_on_the_split_it_scores(tmp_path, pool):
    with pytest.raises(EvalError, match="own split"):
        _run(tmp_path / "r", pool, methods=["sa", "best-per-domain"], benchmarks=["bundled:val/math"])
    with pytest.raises(EvalError, match="best-per-domain"):
        _run(tmp_path / "r2", pool, methods=["auto", "best-per-domain"], best_of=["auto"])
    # humaneval: one task set for any split
    with pytest.raises(EvalError, match="no separate selection split"):
        _run(tmp_path / "r3", pool, methods=["sa", "best-per-domain"], benchmarks=["humaneval"])


def test_sa_auto_takes_k_from_auto_and_every_table_states_the_compute(tmp_path, pool):
    out = tmp_path / "res"
    results = _run(out, pool, methods=["sa", "sa@auto", "sa@2", "auto"])
    entries = results["cells"]["scripted"]["benchmarks"]["bundled:test/math"]
    assert entries["auto"]["budget"]["agent_calls_per_sample"] == 2.0  # the two-agent team
    matched = entries["sa@auto"]
    assert (matched["k"], matched["k_from"], matched["samples"]) == (2, "auto", 4)
    assert (
        matched["budget"]["agent_calls_per_sample"] == 2.0
        and matched["budget"]["designer_calls_per_sample"] == 0
    )
    assert entries["auto"]["budget"]["designer_calls_per_sample"] == 1.0
    assert matched["per_task"] == entries["sa@2"]["per_task"]  # the same records: sa@auto ran as sa@2
    assert matched["records"] == entries["sa@2"]["records"] and matched["records"].endswith("sa_2.jsonl")
    table = render_table(results)
    assert "exec calls/sample | designer calls/sample | tokens/sample |" in table
    row = next(line for line in table.splitlines() if line.startswith("| scripted | sa@auto (k=2) |"))
    assert row.split("|")[-4:-1] == [" 2.00 ", " 0.00 ", f" {matched['budget']['tokens_per_sample']:.0f} "]
    resumed = _run(out, pool, methods=["sa", "sa@auto", "sa@2", "auto"], report_only=True)
    assert resumed["cells"]["scripted"]["benchmarks"]["bundled:test/math"]["sa@auto"]["k"] == 2
    # auto not run yet: sa@auto waits
    waiting = _run(tmp_path / "empty", pool, methods=["sa@auto", "auto"], report_only=True)
    assert waiting["pending"] == [["scripted", "scripted", "bundled:test/math", "sa@auto"]]
    assert not waiting["complete"] and "not run yet, its k waits for `auto`" in render_table(waiting)


def test_sa_matched_to_a_method_not_in_the_run_is_refused(tmp_path, pool):
    with pytest.raises(EvalError, match="not in --methods"):
        _run(tmp_path / "r", pool, methods=["sa", "sa@=fixed:debate"])


# ---- across seeds -----------------------------------------------------------------------------------------


def test_seed_interval_is_the_t_interval_over_seeds():
    mean, low, high = seed_interval([1.0, 2.0, 3.0])
    half = 4.302653 * 1.0 / math.sqrt(3)  # t_{0.975, 2} = 4.302653, s = 1
    assert (
        mean == 2.0
        and low == pytest.approx(2.0 - half, abs=1e-5)
        and high == pytest.approx(2.0 + half, abs=1e-5)
    )
    assert t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-5)
    with pytest.raises(EvalError, match="at least 2 seeds"):
        seed_interval([1.0])


def test_across_seeds_keeps_each_seed_s_task_bootstrap_as_detail():
    per_seed = {0: {"diff": 0.1, "ci95": [0.0, 0.2]}, 1: {"diff": 0.3, "ci95": [0.1, 0.5]}}
    agg = across_seeds(per_seed)
    assert agg["seeds"] == 2 and agg["mean"] == pytest.approx(0.2)
    half = t_quantile(0.975, 1) * math.sqrt(0.02) / math.sqrt(2)
    assert agg["ci95"] == pytest.approx([0.2 - half, 0.2 + half])
    assert agg["per_seed"] == {"0": {"diff": 0.1, "ci95": [0.0, 0.2]}, "1": {"diff": 0.3, "ci95": [0.1, 0.5]}}
    one = across_seeds({0: {"diff": 0.1, "ci95": [0.0, 0.2]}})
    assert one["ci95"] is None and "2 seeds" in one["note"]


def test_serve_refuses_the_per_domain_frozen_designer():
    from metaagent.rollout.engine import FrozenDesign
    from metaagent.serve.team import frozen_preview

    with pytest.raises(ValueError, match="needs one fixed script"):
        frozen_preview(FrozenDesign.resolve("sa"))
