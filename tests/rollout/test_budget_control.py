"""The budget tag (metaagent/rollout/budget.py) and the budget-matched controls of the rollout engine
(``RolloutEngine(controls=True)``): config checks, the seeded draw per question, the prompt line, LOW's cap on
agent calls (the execution is cut and scored as it stands), one control run of K = max k_i executions per
question with synthetic turns and selection marks, never a training sample. Scripted policies: nothing here
depends on what a model samples."""

from __future__ import annotations

import re

import pytest
from builders import samples_of

from metaagent.config import ConfigError
from metaagent.credit import control_baselines
from metaagent.data import Task
from metaagent.policy import ScriptedPolicy
from metaagent.records import RolloutTree
from metaagent.rollout.budget import BUDGET_LINES, BudgetConfig, capped_limits, sample_tag
from metaagent.rollout.config import RolloutConfig
from metaagent.rollout.engine import RolloutEngine
from metaagent.rollout.metrics import rollout_metrics
from metaagent.rollout.prompts import designer_messages
from metaagent.seeding import derive_seed
from metaagent.workflow import SandboxPool

TASKS = [
    Task(id="m1", domain="math", question="What is 2 + 3?", answer="5", source="test"),
    Task(id="m2", domain="math", question="What is 10 - 4?", answer="6", source="test"),
]
SOLO = 'a = Agent("A", "Solve it.")\nsubmit(a(task))\n'
TEAM = 'a = Agent("A", "Solve.")\nb = Agent("B", "Check.")\nc = Agent("C", "Decide.")\nsubmit(c(b(a(task))))\n'
ANSWERS = {"m1": "5", "m2": "6"}


def _designer(scripts: dict[int, str]) -> ScriptedPolicy:
    """Design i of every task writes ``scripts[i]`` (told apart by the request's derived seed)."""
    by_seed = {
        derive_seed(seed, step, t.id, b, i, "design"): s
        for seed, step in ((1, 0), (1, None))
        for b, t in enumerate(TASKS)
        for i, s in scripts.items()
    }
    return ScriptedPolicy(lambda r: f"```python\n{by_seed[r.sampling.seed]}\n```")


def _agent(request) -> str:
    """An agent shown the task answers right on seeds not divisible by 3, else one off (both rewards show up, on
    any machine); an agent shown another agent's answer passes it on."""
    text = "\n".join(m["content"] for m in request.messages)
    task = next((t for t in TASKS if t.question in text), None)
    if task is None:
        value = re.findall(r"\\boxed\{(-?\d+)\}", text)[-1]
    else:
        right = int(ANSWERS[task.id])
        value = right if (request.sampling.seed or 0) % 3 else right - 1
    return f"<delivery>\\boxed{{{value}}}</delivery>"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


# ---- config, draw, prompt, limits ---------------------------------------------------------------------------


def test_budget_config_checks():
    assert not BudgetConfig().enabled and BudgetConfig(tags=["LOW", "HIGH"]).low_max_calls == 1
    for bad, match in (
        ({"tags": ["LOW", "LOW"]}, "twice"),
        ({"tags": ["LOW", "HIGH"], "probs": [1.0]}, "one per tag"),
        ({"tags": ["LOW", "HIGH"], "probs": [0.5, 0.6]}, "sum to 1"),
        ({"tags": ["MEDIUM"]}, "LOW"),
        ({"low_max_calls": 0}, "low_max_calls"),
    ):
        with pytest.raises(ConfigError, match=match):
            BudgetConfig(**bad)
    cfg = RolloutConfig(budget={"tags": ["LOW"], "low_max_calls": 2})
    assert isinstance(cfg.budget, BudgetConfig) and cfg.budget.low_max_calls == 2


def test_the_tag_is_drawn_per_question_from_the_seed():
    both = BudgetConfig(tags=["LOW", "HIGH"])
    draws = [sample_tag(both, 7, 3, f"t{i}", i) for i in range(40)]
    assert draws == [sample_tag(both, 7, 3, f"t{i}", i) for i in range(40)]  # a replay draws the same
    assert set(draws) == {"LOW", "HIGH"}
    assert draws != [sample_tag(both, 8, 3, f"t{i}", i) for i in range(40)]  # another run seed, other draws
    assert {sample_tag(BudgetConfig(tags=["LOW", "HIGH"], probs=[1.0, 0.0]), s, 0, "t", 0) for s in range(20)} == {"LOW"}
    assert {sample_tag(BudgetConfig(tags=["LOW", "HIGH"], probs=[0.0, 1.0]), s, 0, "t", 0) for s in range(20)} == {"HIGH"}
    assert sample_tag(BudgetConfig(), 7, 3, "t", 0) is None


def test_low_caps_the_agent_calls_and_never_raises_them():
    limits = {"timeout_s": 10.0, "max_agent_calls": 4}
    assert capped_limits(limits, "LOW", 1) == {"timeout_s": 10.0, "max_agent_calls": 1}
    assert capped_limits(limits, "LOW", 9)["max_agent_calls"] == 4
    assert capped_limits({"timeout_s": 10.0}, "LOW", 2)["max_agent_calls"] == 2
    assert capped_limits(limits, "HIGH", 1) == limits == capped_limits(limits, None, 1)
    with pytest.raises(ConfigError, match="LOW, HIGH"):
        capped_limits(limits, "low", 1)


@pytest.mark.parametrize("style", ["full", "compact"])
def test_the_prompt_line_follows_the_task_and_no_tag_changes_nothing(style):
    task = TASKS[0]
    plain = designer_messages(task, [], style=style)
    assert designer_messages(task, [], style=style, budget=None) == plain
    for tag in ("LOW", "HIGH"):
        user = designer_messages(task, [], style=style, budget=tag)[1]["content"]
        assert BUDGET_LINES[tag] in user and user.index(task.question) < user.index(BUDGET_LINES[tag])
        assert user.replace("\n\n" + BUDGET_LINES[tag], "") == plain[1]["content"]


# ---- the engine ---------------------------------------------------------------------------------------------


def _engine(pool, scripts, **kw) -> RolloutEngine:
    cfg = RolloutConfig(m_designs=len(scripts), n_executions=2, k_templates=0, **kw.pop("config", {}))
    return RolloutEngine(_designer(scripts), ScriptedPolicy(_agent), cfg, pool=pool, **kw)


def test_low_cuts_an_execution_at_the_cap_and_scores_it_as_it_stands(pool):
    trees = _engine(pool, {0: SOLO, 1: TEAM}, budget_tag="LOW").rollout(TASKS[:1], step=0, seed=1)
    (tree,) = trees
    assert tree.budget == "LOW"
    assert BUDGET_LINES["LOW"] in tree.designs[0].sample.messages[-1]["content"]
    solo, team = tree.designs
    assert [(e.status, len(e.turns)) for e in solo.executions] == [("ok", 1), ("ok", 1)]
    for e in team.executions:  # the second call would pass the cap: cut there, nothing submitted, R_correct 0
        assert (e.status, len(e.turns), e.submitted) == ("limit", 1, False)
        assert e.error.type == "AgentCallLimit" and e.reward.correct == 0.0
    high = _engine(pool, {0: SOLO, 1: TEAM}, budget_tag="HIGH").rollout(TASKS[:1], step=0, seed=1)[0]
    assert [len(e.turns) for e in high.designs[1].executions] == [3, 3] and high.budget == "HIGH"
    m = rollout_metrics(trees)
    assert m["rollout/budget/LOW/tasks"] == 1 and m["rollout/budget/LOW/calls_per_execution"] == 1.0


def test_training_rollouts_draw_tags_and_other_rollouts_show_none(pool):
    cfg = {"budget": {"tags": ["LOW", "HIGH"], "probs": [1.0, 0.0]}}
    engine = _engine(pool, {0: SOLO}, config=cfg)
    train = engine.rollout(TASKS, step=0, seed=1)
    assert [t.budget for t in train] == ["LOW", "LOW"]
    evaluated = engine.rollout(TASKS[:1], step=None, seed=1, mode="eval")
    assert evaluated[0].budget is None and "Budget:" not in evaluated[0].designs[0].sample.messages[-1]["content"]


@pytest.mark.parametrize("continuous", [False, True], ids=["staged", "overlapped"])
def test_one_control_run_per_question_synthetic_and_never_trained(pool, continuous):
    engine = _engine(pool, {0: SOLO, 1: TEAM, 2: SOLO}, controls=True)
    engine.designer.continuous = continuous
    trees = engine.rollout(TASKS, step=0, seed=1)
    for tree in trees:
        ks = [k for k, _ in control_baselines(tree)]
        assert ks == [1, 3, 1]  # two designs share k = 1 and the run of K = 3
        c = tree.control
        assert len(c.executions) == 3 and c.select == "majority" and c.source == "control:sa"
        assert [e.index for e in c.executions] == [0, 1, 2]
        assert all(len(e.turns) == 1 and e.turns[0].synthetic for e in c.executions)
        assert all(e.reward is not None and e.reward.total is not None for e in c.executions)
        assert set(c.marks) <= {ANSWERS[tree.task_id], str(int(ANSWERS[tree.task_id]) - 1)}
        assert all(not t.synthetic for _, e in tree.executions() for t in e.turns)
        assert RolloutTree.from_json(tree.to_json()) == tree
    samples = samples_of(trees, designer_baseline="control")
    design_turns = sum(len(e.turns) for t in trees for _, e in t.executions())
    executor = [s for s in samples if s.role == "executor"]
    assert len(executor) == design_turns and all(s.key[1] >= 0 for s in executor)  # no control turn
    m = rollout_metrics(trees)
    assert m["rollout/control_calls"] == 6 and m["rollout/control_executions"] == 6
    assert m["rollout/executions"] == 12  # the designs' executions only


def test_no_controls_unless_asked_and_only_in_training(pool):
    plain = _engine(pool, {0: SOLO}).rollout(TASKS[:1], step=0, seed=1)[0]
    assert plain.control is None and "rollout/control_calls" not in rollout_metrics([plain])
    engine = _engine(pool, {0: SOLO}, controls=True)
    assert engine.rollout(TASKS[:1], step=None, seed=1, mode="eval")[0].control is None


def test_the_control_is_seeded_like_every_execution(pool):
    a = _engine(pool, {0: TEAM}, controls=True).rollout(TASKS[:1], step=0, seed=1)[0]
    b = _engine(pool, {0: TEAM}, controls=True).rollout(TASKS[:1], step=0, seed=1)[0]
    seeds = [e.seed for e in a.control.executions]
    assert seeds == [e.seed for e in b.control.executions] and len(set(seeds)) == 3
    assert seeds[0] == derive_seed(1, 0, "m1", 0, "control", 0)
    assert a.control.marks == b.control.marks


def test_a_domain_without_a_single_agent_script_says_so(pool):
    qa = Task(id="q1", domain="qa", question="Who wrote Hamlet?", answer="Shakespeare", source="test")
    cfg = RolloutConfig(m_designs=1, n_executions=1, k_templates=0)
    engine = RolloutEngine(
        ScriptedPolicy(lambda r: f"```python\n{SOLO}\n```"), ScriptedPolicy(lambda r: "<delivery>x</delivery>"),
        cfg, pool=pool, controls=True,
    )  # fmt: skip
    with pytest.raises(ValueError, match="designer_baseline=control runs one agent per task, but domain 'qa'"):
        engine.rollout([qa], step=0, seed=1)
