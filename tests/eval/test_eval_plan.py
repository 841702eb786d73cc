"""Planning puzzles as ``metaagent-eval`` benchmarks and AT-GRPO's Table 3 switches, checked on the records:
per-role models (``role_models``: "training in SA, eval in MAS") and swapped role models (``swap_roles``)."""

from __future__ import annotations

import pytest

from metaagent.data import DatasetSpec, load_tasks
from metaagent.envs import make_env
from metaagent.envs.planpath import bfs
from metaagent.eval import EvalError, Evaluation, make_config
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.records import read_trees
from metaagent.workflow import SandboxPool

TASKS = load_tasks(DatasetSpec(source="planpath", split="test", limit=2))


def shortest_moves(task) -> str:
    """A shortest move list of the task's board (the scripted planner's 'knowledge')."""
    env = make_env(task.metadata["env"])
    to_goal = bfs(env.walls, env.goal)
    pos, moves = env.pos, []
    while pos != env.goal:
        for m in "UDLR":
            ok, nxt = env.legal(pos, m)
            if ok and to_goal.get(nxt) == to_goal[pos] - 1:
                pos, moves = nxt, [*moves, m]
                break
    return "[" + ", ".join(moves) + "]"


SOLUTIONS = {t.question.split("Initial state:\n")[1]: shortest_moves(t) for t in TASKS[:1]}  # knows board 1 only


def planner(request: ChatRequest) -> str:
    text = "\n".join(m["content"] for m in request.messages)
    if "Tool" in request.agent:
        return '<delivery>```python\nprint("[U]")\n```</delivery>'
    for board, moves in SOLUTIONS.items():
        if board in text:
            return f"<delivery>##### {moves}</delivery>"
    return "<delivery>##### [L]</delivery>"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


def _run(tmp_path, pool, **kw):
    policies = {name: ScriptedPolicy(planner, model_id=name) for name in ("base", "tool-sa", "plan-sa")}
    values = {"models": ["base"], "benchmarks": ["planpath:test"], "limit": 2, "n": 1, "k": [1], "out": str(tmp_path),
              "bootstrap": 100, "concurrency": 2, "html": False}  # fmt: skip
    values.update(kw)
    results = Evaluation(make_config(**values), policies=policies, pool=pool).run()
    trees = [t for f in sorted(tmp_path.glob("rollouts/**/*.jsonl")) for t in read_trees(f)[0]]
    return results, trees


def _models_by_role(trees) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for tree in trees:
        for _, e in tree.executions():
            for turn in e.turns:
                out.setdefault(turn.role, set()).add(turn.model)
    return out


def test_planpath_is_an_offline_benchmark_scored_by_the_environment(tmp_path, pool, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # generated boards need no hub
    results, trees = _run(tmp_path, pool, methods=["sa", "fixed:single_plan"])
    assert len(trees) == 4 and all(t.task_id.startswith("planpath-test-") for t in trees)
    correct = {(t.config["eval"]["method"], t.task_id): e.reward.correct for t in trees for _, e in t.executions()}
    # the scripted planner knows the shortest path of the first board only: solved there, not on the second
    assert correct == {(m, TASKS[0].id): 1.0 for m in ("sa", "fixed:single_plan")} | {(m, TASKS[1].id): 0.0 for m in ("sa", "fixed:single_plan")}


def test_role_models_route_each_agent_and_swap_roles_exchanges_them(tmp_path, pool):
    role_models = {"ToolAgent": "tool-sa", "PlanAgent": "plan-sa"}
    _, plain = _run(tmp_path / "plain", pool, methods=["fixed:at_plan_t2"])
    assert _models_by_role(plain) == {"ToolAgent": {"base"}, "PlanAgent": {"base"}}
    _, routed = _run(tmp_path / "routed", pool, methods=["fixed:at_plan_t2"], role_models=role_models)
    assert _models_by_role(routed) == {"ToolAgent": {"tool-sa"}, "PlanAgent": {"plan-sa"}}
    _, swapped = _run(tmp_path / "swapped", pool, methods=["fixed:at_plan_t2"], role_models=role_models, swap_roles=["ToolAgent", "PlanAgent"])
    assert _models_by_role(swapped) == {"ToolAgent": {"plan-sa"}, "PlanAgent": {"tool-sa"}}
    assert all(len(e.turns) >= 2 for t in swapped for _, e in t.executions())


def test_swap_roles_needs_two_role_models_keys(tmp_path):
    with pytest.raises(EvalError, match="--swap-roles takes two different keys"):
        make_config(out=str(tmp_path), role_models={"ToolAgent": "a"}, swap_roles=["ToolAgent", "PlanAgent"])
    with pytest.raises(EvalError, match="--swap-roles"):
        make_config(out=str(tmp_path), role_models={"A": "a", "B": "b"}, swap_roles=["A", "A"])
