"""metaagent-replay on trees with a budget-matched control (``RolloutTree.control``) and a budget tag: the
console and HTML replays show each design's budget, the control's reward and the difference, and the control's
executions; ``--control`` shows the control alone; ``rerun(control=True)`` re-executes a control execution with
its recorded seed, under the tree's budget cap. Scripted policies only."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from metaagent.cli.replay import main
from metaagent.data import Task
from metaagent.policy import ScriptedPolicy
from metaagent.records import write_trees
from metaagent.replay import ReplayError, load_run, render_html, rerun
from metaagent.replay.text import control_rows
from metaagent.rollout.config import RolloutConfig
from metaagent.rollout.engine import RolloutEngine

TASK = Task(id="c-add", domain="math", question="What is 4 + 4?", answer="8", source="test")
TEAM = 'a = Agent("A", "Solve.")\nb = Agent("B", "Check.")\nsubmit(b(a(task)))\n'


def _agent(request) -> str:
    text = "\n".join(m["content"] for m in request.messages)
    if TASK.question not in text:
        return "<delivery>" + re.findall(r"\\boxed\{\d+\}", text)[-1] + "</delivery>"
    return "<delivery>\\boxed{8}</delivery>" if (request.sampling.seed or 0) % 2 else "<delivery>\\boxed{7}</delivery>"


@pytest.fixture(scope="module")
def control_run(tmp_path_factory):
    from metaagent.workflow import SandboxPool

    root = tmp_path_factory.mktemp("control_run")
    cfg = RolloutConfig(m_designs=1, n_executions=2, k_templates=0, budget={"low_max_calls": 2})
    with SandboxPool(workers=2) as pool:
        engine = RolloutEngine(
            ScriptedPolicy(lambda r: f"```python\n{TEAM}```"), ScriptedPolicy(_agent), cfg, pool=pool,
            record_config={"rollout": dataclasses.asdict(cfg)}, controls=True, run_id="ctl",
        )  # fmt: skip
        trees = engine.rollout([TASK], step=0, seed=5)
        plain = RolloutEngine(
            ScriptedPolicy(lambda r: f"```python\n{TEAM}```"), ScriptedPolicy(_agent), cfg, pool=pool, run_id="ctl"
        ).rollout([Task(id="no-ctl", domain="math", question=TASK.question, answer="8")], step=0, seed=5)
    path = root / "rollouts" / "step_000000.jsonl"
    path.parent.mkdir(parents=True)
    write_trees(path, trees + plain)
    return root, trees[0]


def _cli(capsys, *argv) -> tuple[int, str]:
    with pytest.raises(SystemExit) as done:
        main(["--width", "200", *map(str, argv)])
    out, _ = capsys.readouterr()
    return done.value.code, out


def test_the_task_replay_lists_the_control_after_the_designs(capsys, control_run):
    root, tree = control_run
    rows = control_rows(tree)
    assert [(i, k) for i, k, *_ in rows] == [(0, 2)] and len(tree.control.executions) == 2
    code, out = _cli(capsys, root, "--task", TASK.id)
    assert code == 0
    assert out.index("design 0 · designer") < out.index("control · control:sa · 2 executions · select majority")
    assert "budget-matched control per design" in out and "selection mark (majority)" in out
    assert "synthetic (not sampled; never trained)" in out
    code, only = _cli(capsys, root, "--task", TASK.id, "--control")
    assert code == 0 and "control · control:sa" in only and "design 0 · designer" not in only
    code, dumped = _cli(capsys, root, "--task", TASK.id, "--json")
    (record,) = json.loads(dumped)
    assert record["control"]["marks"] == tree.control.marks and record["control"]["select"] == "majority"
    code, none = _cli(capsys, root, "--task", "no-ctl", "--control")
    assert code == 0 and "has no control" in none


def test_the_html_report_has_the_control(control_run, tmp_path):
    root, _ = control_run
    html = (render_html(load_run(root), tmp_path / "r.html", tasks=["c-add"])).read_text()
    assert "control · control:sa · 2 executions" in html and "design - control" in html


def test_a_control_execution_reruns_with_its_seed(control_run):
    root, tree = control_run
    from metaagent.workflow import SandboxPool

    with SandboxPool(workers=1) as pool:
        res = rerun(root, TASK.id, ScriptedPolicy(_agent), execution=1, pool=pool, control=True)
        assert res.design == -1 and res.seed == tree.control.executions[1].seed
        assert res.identical_turns and res.same_answer and res.same_reward
        with pytest.raises(ReplayError, match=r"has executions \[0, 1\], not 4"):
            rerun(root, TASK.id, ScriptedPolicy(_agent), execution=4, pool=pool, control=True)
        with pytest.raises(ReplayError, match="has no control"):
            rerun(root, "no-ctl", ScriptedPolicy(_agent), pool=pool, control=True)


def test_a_low_tree_reruns_under_its_cap(control_run, tmp_path):
    root, tree = control_run
    low = dataclasses.replace(tree, budget="LOW", config_hash="")
    path = tmp_path / "rollouts" / "step_000000.jsonl"
    path.parent.mkdir(parents=True)
    write_trees(path, [low])
    from metaagent.workflow import SandboxPool

    with SandboxPool(workers=1) as pool:
        res = rerun(tmp_path, TASK.id, ScriptedPolicy(_agent), pool=pool)
    assert res.limits["max_agent_calls"] == 2  # the record's rollout.budget.low_max_calls
    assert any("budget LOW" in n for n in res.notes)
