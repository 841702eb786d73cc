"""UnityMAS-O's fixed workflows run end to end with scripted agents: the reflective code loop (stops when
the tests pass, rounds recorded), the sequential and parallel retrieval QA workflows (retrieve tool, F1),
then allocators and the ``unity`` estimator over the records."""

from __future__ import annotations

import re

import pytest

from metaagent.credit import assign_credit
from metaagent.data import Task
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.rewards.turn import allocate_turn_rewards, turn_reward_metrics
from metaagent.rollout.config import RolloutConfig
from metaagent.rollout.engine import RolloutEngine
from metaagent.workflow import SandboxPool

TESTS = {"inputs": ["1 2\n", "2 2\n", "0 5\n", "3 0\n"], "outputs": ["3\n", "4\n", "5\n", "3\n"]}
CODE = Task(id="sum", domain="code", question="Read a and b, print a+b.", tests=TESTS,
            metadata={"public_tests": TESTS}, source="test")  # fmt: skip
QA = Task(id="q", domain="qa", question="Which river flows through the capital of France?", answer="Seine", source="test")


def code_agents(request: ChatRequest) -> str:
    system, user = request.messages[0]["content"], request.messages[-1]["content"]
    if system.startswith("You plan"):
        round_ = re.search(r"Round (\d)", user).group(1)
        return f"<delivery>plan for round {round_}</delivery>"
    if system.startswith("You write"):  # round 1 prints 3 (2/4 tests), round 2 is right
        body = "print(3)" if "round 1" in user else "a, b = map(int, input().split())\nprint(a + b)"
        return f"<delivery>```python\n{body}\n```</delivery>"
    return "<delivery>it ignores the input</delivery>"


def qa_agents(request: ChatRequest) -> str:
    system, user = request.messages[0]["content"], request.messages[-1]["content"]
    if system.startswith("You split"):
        return "<delivery>capital of France\nriver through Paris</delivery>"
    if system.startswith("You write the next"):
        return "<delivery><end></delivery>" if "Seine" in user else "<delivery>river Paris</delivery>"
    return "<delivery><answer>Seine</answer></delivery>" if "Seine" in user else "<delivery><answer>Paris</answer></delivery>"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


def _rollout(pool, frozen, policy, task, limits=None):
    cfg = RolloutConfig(m_designs=1, n_executions=2, frozen_designer=frozen, limits=limits or {"timeout_s": 60})
    engine = RolloutEngine(None, policy, cfg, pool=pool, run_id="t")
    return engine.rollout([task], seed=1)


def test_code_loop_stops_when_tests_pass_and_the_coder_rewards_telescope(pool):
    trees = _rollout(pool, "unity_code_reflect", ScriptedPolicy(code_agents), CODE)
    e = trees[0].designs[0].executions[0]
    assert [t.role for t in e.turns] == ["Planner", "Coder", "Reflector", "Planner", "Coder"]
    assert [c.name for c in e.tool_calls] == ["run_tests", "run_tests"] and e.reward.correct == 1.0
    allocate_turn_rewards(trees, "code_delta")
    assert [t.reward.total for t in e.turns] == [0.5, 0.5, 0.5, 0.5, 0.5]
    m = turn_reward_metrics(trees)
    assert m["rollout/rounds_used"] == 2.0 and m["reward/turn/Coder"] == 0.5
    credit = assign_credit(trees, "unity", mode="whiten")
    assert credit.metrics["credit/turn_advantages"] == 10  # every turn rewarded; identical runs whiten to 0
    assert all(t.advantage == 0.0 for t in e.turns)


def test_code_loop_with_a_limit_never_runs_the_third_round(pool):
    trees = _rollout(pool, "unity_code_reflect", ScriptedPolicy(lambda r: "no delivery"), CODE,
                     limits={"timeout_s": 60, "max_agent_calls": 8})  # fmt: skip
    e = trees[0].designs[0].executions[0]
    # 3 rounds x (planner, coder) + 2 reflectors = 8 calls; every program is missing: R_i = 0, f = -1 each
    assert len(e.turns) == 8 and max(t.role_turn for t in e.turns) == 2
    allocate_turn_rewards(trees, "code_delta")
    assert all(t.reward.total == -1.0 for t in e.turns)


def test_sequential_qa_updates_its_answer_and_gets_the_f1_gain(pool):
    trees = _rollout(pool, "unity_qa_sequential", ScriptedPolicy(qa_agents), QA)
    e = trees[0].designs[0].executions[0]
    assert [t.role for t in e.turns] == ["Answerer", "Searcher", "Answerer", "Searcher"]
    assert e.tool_calls[0].name == "retrieve" and "Seine" in e.tool_calls[0].result
    assert e.reward.correct == 1.0
    allocate_turn_rewards(trees, "iterative_delta", stop_role="Searcher")
    # a_0 "Paris" F1 0, a_1 "Seine" F1 1: searcher_0 (turn 1) gets 1 - 0; searcher_1 says <end>: 0
    assert [t.reward.total for t in e.turns] == [0.0, 1.0, 1.0, 0.0]


def test_parallel_qa_retrieves_each_query_and_shares_the_outcome(pool):
    trees = _rollout(pool, "unity_qa_parallel", ScriptedPolicy(qa_agents), QA)
    e = trees[0].designs[0].executions[0]
    assert [c.name for c in e.tool_calls] == ["retrieve", "retrieve"] and e.reward.correct == 1.0
    allocate_turn_rewards(trees, "shared_outcome", outcome="correct", format_weight=1.0)
    assert [t.reward.total for t in e.turns] == [1.0, 1.0]


def test_the_workflow_graph_is_recorded_and_replayed(pool):
    from rich.console import Console

    from metaagent.records import RolloutTree, graph_lines
    from metaagent.replay.console import print_execution
    from metaagent.replay.report import _execution

    trees = _rollout(pool, "unity_code_reflect", ScriptedPolicy(code_agents), CODE)
    e = RolloutTree.from_json(trees[0].to_json()).designs[0].executions[0]  # survives the JSONL round trip
    edges = {(x["src"], x["dst"], x["kind"]) for x in e.graph["edges"]}
    # planner -> coder; the coder's program goes into the verifier; its report into the reflector, whose
    # reflection reaches the next planner; the second verifier call reads the second coder
    assert {("t0", "t1", "data"), ("t1", "x0", "data"), ("x0", "t2", "data"), ("t2", "t3", "data"),
            ("t4", "x1", "data")} <= edges  # fmt: skip
    assert [n["id"] for n in e.graph["nodes"]] == ["t0", "t1", "t2", "t3", "t4", "x0", "x1"]
    assert graph_lines(e.graph)[1] == "t1 Coder (round 0) -> t2, -> x0"
    console = Console(record=True, width=200)
    print_execution(e, trees[0].task, console)
    assert "workflow graph: t0 Planner (round 0) -> t1" in console.export_text()
    assert "<b>workflow graph</b>" in _execution(e, trees[0].task) and "x0 run_tests [tool] -&gt; t2" in _execution(e, trees[0].task)
