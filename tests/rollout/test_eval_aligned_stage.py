"""The evaluation-aligned post-rollout stage with a scripted team (no model): which runs and judge calls it
makes, exactly, what it writes into the records, and what a budget refuses.

Team: Solver, then Checker (submitted). During the rollout the Solver answers ``\\boxed{3}``; during the
stage it answers ``\\boxed{4}`` (so a resample differs from the recorded reply). The Checker repeats the
boxed answer it is shown, else says "no idea". Tasks: "1 + 2" (answer 3: a success) and "2 + 2" (a failure).
"""

from __future__ import annotations

import re

import pytest

from metaagent.credit import assign_credit
from metaagent.data.tasks import Task
from metaagent.policy import ScriptedPolicy
from metaagent.rollout.config import RolloutConfig
from metaagent.rollout.engine import FrozenDesign, RolloutEngine
from metaagent.rollout.eval_aligned import EvalAlignedConfig, EvalAlignedStage

SCRIPT = (
    'solver = Agent("Solver", "Solve it.")\n'
    'checker = Agent("Checker", "Check the answer.")\n'
    "draft = solver(task)\n"
    'submit(checker(task + "\\n" + draft))\n'
)
TASKS = [
    Task(id="ok", domain="math", question="What is 1 + 2?", answer="3", source="test"),
    Task(id="bad", domain="math", question="What is 2 + 2?", answer="4", source="test"),
]


class Team:
    def __init__(self) -> None:
        self.solver_answer = "3"

    def __call__(self, request) -> str:
        text = request.messages[-1]["content"]
        if request.agent == "Solver":
            return f"<delivery>\\boxed{{{self.solver_answer}}}</delivery>"
        m = re.search(r"\\boxed\{(\d+)\}", text)
        return f"<delivery>\\boxed{{{m.group(1)}}}</delivery>" if m else "no idea"


@pytest.fixture
def rolled():
    team = Team()
    engine = RolloutEngine(
        ScriptedPolicy(["unused"], cycle=True), ScriptedPolicy(team), RolloutConfig(m_designs=1, n_executions=1, sandbox_workers=1)
    )
    trees = engine.rollout(TASKS, seed=0, frozen=FrozenDesign(script=SCRIPT, name="team"))
    team.solver_answer = "4"
    yield engine, trees
    engine.close()


def _stage(engine, **cfg):
    return EvalAlignedStage(engine, EvalAlignedConfig(**{"prefix_judge": "rule:gold", **cfg}))


def test_the_stage_writes_coalitions_labels_first_error_pair_and_correction_and_counts_them(rolled):
    engine, trees = rolled
    m = _stage(engine).annotate(trees)
    good = trees[0].designs[0].executions[0]
    bad = trees[1].designs[0].executions[0]
    assert good.reward.correct == 1.0 and bad.reward.correct == 0.0
    # success: 2 agents -> coalitions ∅, {Checker}, {Solver}, each worth 0; both turns helpful
    assert sorted(tuple(cf.members) for cf in good.counterfactuals) == [(), ("Checker",), ("Solver",)]
    assert all(cf.reward.correct == 0.0 for cf in good.counterfactuals)  # fail: v = 0
    assert [t.labels for t in good.turns] == [{"helpful": 1.0}, {"helpful": 1.0}]
    assert [t.reward.total for t in good.turns] == pytest.approx([good.reward.total / 2] * 2)
    # failure: H_1 boxes 3 (wrong) -> t* = 1 with one query; the first resample boxes 4 and passes
    assert bad.first_error.turn == 1 and bad.first_error.queries == [{"turn": 1, "verdict": "ERR"}]
    assert [t.labels for t in bad.turns] == [{"helpful": 0.0}, {}]  # Eq. 9: 0 at t* = 1, nothing after it
    (pair,) = bad.preferences
    assert pair.turn == 0 and pair.source == "resample" and pair.rejected_ids == bad.turns[0].response_ids
    (correction,) = [cf for cf in bad.counterfactuals if cf.baseline == "correction:1"]
    assert correction.reward.correct == 1.0  # the checker repeats the corrected answer
    P = "credit/eval_aligned/"
    assert (m[P + "runs"], m[P + "coalition_runs"], m[P + "correction_runs"], m[P + "prefix_runs"]) == (4, 3, 1, 0)
    assert (m[P + "judge_calls"], m[P + "prefix_queries"], m[P + "nbest_samples"]) == (4, 2, 1)  # 2 labels + 2 prefix
    credit = assign_credit(trees, "eval_aligned", pg_baseline="none")
    assert [t.advantage for t in good.turns] == pytest.approx([good.reward.total / 2] * 2)
    assert credit.metrics[P + "pairs"] == 1 and credit.metrics[P + "no_pair"] == 0


def test_the_mc_prefix_judge_runs_forced_continuations(rolled):
    engine, trees = rolled
    m = _stage(engine, prefix_judge="mc", mc_continuations=2, helpful_judge="none").annotate(trees)
    bad = trees[1].designs[0].executions[0]
    # query H_1: 2 continuations (checker repeats the wrong 3) -> ERR; the resample (4) passes on its 1st run
    forced = [cf for cf in bad.counterfactuals if cf.baseline == "forced:1"]
    checks = [cf for cf in bad.counterfactuals if cf.baseline == "resample:1"]
    assert (len(forced), len(checks)) == (2, 1) and bad.first_error.turn == 1 and len(bad.preferences) == 1
    assert [c.reward.correct for c in forced + checks] == [0.0, 0.0, 1.0]
    P = "credit/eval_aligned/"
    assert (m[P + "prefix_runs"], m[P + "judge_calls"], m[P + "runs"]) == (3, 0, 3 + 3 + 1)
    assert all(not t.labels for t in trees[0].designs[0].executions[0].turns)  # no helpfulness judge: uniform


def test_a_budget_refuses_runs_and_the_estimator_counts_the_missing_coalitions(rolled):
    engine, trees = rolled
    m = _stage(engine, max_runs_per_step=2).annotate(trees)
    P = "credit/eval_aligned/"
    assert m[P + "runs"] == 2 and m[P + "budget_refused_runs"] == 2  # 1 coalition + the correction
    assert len(trees[1].designs[0].executions[0].preferences) == 1  # judge calls were not limited
    credit = assign_credit(trees, "eval_aligned")
    assert credit.metrics[P + "missing_coalitions"] == 1
    assert all(t.advantage is None for t in trees[0].designs[0].executions[0].turns)


def test_a_judge_budget_leaves_the_pair_unfound_and_counted(rolled):
    engine, trees = rolled
    # 2 helpfulness labels + the bisection query; the resample's check is refused
    m = _stage(engine, max_judge_calls_per_step=3).annotate(trees)
    P = "credit/eval_aligned/"
    assert m[P + "judge_calls"] == 3 and m[P + "budget_refused_judge_calls"] == 1
    bad = trees[1].designs[0].executions[0]
    assert bad.first_error.turn == 1 and bad.preferences == []
    assert assign_credit(trees, "eval_aligned").metrics[P + "no_pair"] == 1


def test_config_errors_name_the_fix():
    from metaagent.config import ConfigError
    from metaagent.train.config import TrainConfig

    with pytest.raises(ConfigError, match="set optim.dpo=true"):
        TrainConfig.load(None, ["algo.estimator=eval_aligned"])
    with pytest.raises(ConfigError, match=r"unknown rule 'nope'; known: \['gold'\]"):
        EvalAlignedConfig(prefix_judge="rule:nope")
    with pytest.raises(ConfigError, match="baseline must be one of"):
        EvalAlignedConfig(baseline="zero")
    cfg = TrainConfig.load(None, ["algo.estimator=eval_aligned", "optim.dpo=true", "algo.options={pg_baseline: agent_batch}",
                                  "eval_aligned.baseline=mask"])  # fmt: skip
    assert cfg.eval_aligned.baseline == "mask" and cfg.algo.options == {"pg_baseline": "agent_batch"}


def test_the_mask_baseline_echoes_each_replaced_agents_input(rolled):
    engine, trees = rolled
    _stage(engine, baseline="mask", helpful_judge="none").annotate(trees)
    good = trees[0].designs[0].executions[0]
    (only_checker,) = [cf for cf in good.counterfactuals if cf.members == ["Checker"]]
    solver = only_checker.turns[0]
    assert only_checker.baseline == "mask" and solver.synthetic and solver.response == solver.messages[-1]["content"]


def test_the_failure_route_writes_eq9_labels_before_and_at_the_first_error():
    """Eq. 9: q = 1 for the turns before the first error t*, q = 0 at t*, later turns unlabelled; the protocol
    metrics count them beside the success route's labels. Here the Solver is right (4) and the Checker
    submits 5: H_1 is OK, the full trace ERR, so t* = 2."""
    from metaagent.credit.eval_aligned import protocol_metrics

    def team(request) -> str:
        return "<delivery>\\boxed{4}</delivery>" if request.agent == "Solver" else "<delivery>\\boxed{5}</delivery>"

    engine = RolloutEngine(
        ScriptedPolicy(["unused"], cycle=True), ScriptedPolicy(team), RolloutConfig(m_designs=1, n_executions=1, sandbox_workers=1)
    )
    try:
        trees = engine.rollout(TASKS[1:], seed=0, frozen=FrozenDesign(script=SCRIPT, name="team"))
        m = _stage(engine, helpful_judge="none", correction_check=False).annotate(trees)
    finally:
        engine.close()
    e = trees[0].designs[0].executions[0]
    assert e.reward.correct == 0.0 and e.first_error.turn == 2 and e.first_error.role == "Checker"
    assert [t.labels for t in e.turns] == [{"helpful": 1.0}, {"helpful": 0.0}]
    P = "credit/eval_aligned/"
    assert m[P + "prefix_queries"] >= 1
    pm = protocol_metrics(trees)
    assert pm[P + "failure_labelled_steps"] == 2 and pm[P + "failure_helpful_fraction"] == 0.5
    assert pm[P + "labelled_steps"] == 0  # the success route's labels: none here
