"""Template-only distillation with a scripted executor: prompts as the engine builds them, correct runs only."""

from __future__ import annotations

import json
import re

import pytest
from distill_teacher_server import solve

from metaagent.data import DatasetSpec, load_tasks
from metaagent.distill import DistillConfig, Distiller
from metaagent.distill.examples import EXAMPLE_FIELDS
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.rollout.config import RolloutConfig, SamplingConfig
from metaagent.rollout.engine import RolloutEngine
from metaagent.workflow import SandboxPool, check_script, extract_script

TASKS = load_tasks(DatasetSpec(source="bundled", split="train", levels=[1], domain="math", limit=4))
WRONG = {TASKS[1].id}  # the executor gets this task wrong: nothing of it may be kept


def executor_reply(request: ChatRequest) -> str:
    """Right on every task but one; critics approve, verifiers validate, planners plan."""
    system = request.messages[0]["content"]
    text = "\n".join(m["content"] for m in request.messages)
    value = solve(text) or "0"
    if any(t.question in text for t in TASKS if t.id in WRONG):
        value = str(int(value) + 1)
    if "CORRECT" in system:
        return "<delivery>CORRECT</delivery>"
    if "VALID" in system:
        return "<delivery>VALID</delivery>"
    if "Do not solve" in system or "smaller subproblems" in system:
        return "<delivery>Compute it.</delivery>"
    if "Python program" in system:  # the coder of tool_pair and pot: a program that prints the value
        return f"<delivery>```python\nprint({value})\n```</delivery>"
    return f"It is {value}. <delivery>\\boxed{{{value}}}</delivery>"


def rollout(**changes) -> dict:
    base = {
        "m_designs": 3,
        "n_executions": 2,
        "k_templates": 1,
        "designer": {"temperature": 1.0, "max_tokens": 256},
        "executor": {"temperature": 1.0, "max_tokens": 64, "stop": ["</delivery>"]},
        "limits": {"timeout_s": 20, "max_agent_calls": 8},
        "sandbox_workers": 2,
    }
    return {**base, **changes}


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=4) as p:
        yield p


def lines(path) -> list[dict]:
    return [json.loads(x) for x in open(path).read().splitlines() if x.strip()]


def test_template_only_keeps_correct_runs_with_the_engines_designer_prompt(tmp_path, pool):
    cfg = DistillConfig(out=str(tmp_path), template_only=True, rollout=rollout(), seed=3, tasks_in_flight=2)
    executor = ScriptedPolicy(executor_reply, model_id="scripted-executor")
    with Distiller(cfg, executor=executor, pool=pool, count_tokens=lambda s: len(s) // 4) as d:
        summary = d.run(TASKS)
    assert sorted(summary.processed) == sorted(t.id for t in TASKS) and not summary.failed
    designer, executor_rows = lines(tmp_path / "designer.jsonl"), lines(tmp_path / "executor.jsonl")
    assert {r["task_id"] for r in designer} == {t.id for t in TASKS} - WRONG
    assert {r["task_id"] for r in executor_rows} == {t.id for t in TASKS} - WRONG
    for r in designer + executor_rows:
        assert set(r) == set(EXAMPLE_FIELDS) and r["correct"] is True and r["source"] == "template"

    # the designer prompt is exactly the one the engine gives the RL designer for the same (seed, task, design)
    engine = RolloutEngine(
        ScriptedPolicy(lambda r: "no script"), executor, RolloutConfig(m_designs=3, k_templates=1), pool=pool
    )
    trees = {t.id: engine.rollout([t], seed=3, mode="eval")[0] for t in TASKS}
    engine_prompts = {(tid, d.index): d.sample.messages for tid, tree in trees.items() for d in tree.designs}
    for r in designer:
        assert r["messages"][:-1] == engine_prompts[(r["task_id"], r["design"])]
        script = extract_script(r["messages"][-1]["content"])
        assert check_script(script).ok
        assert r["template"] and r["templates_shown"] and len(r["messages"][-1]["content"]) // 4 <= 248
        assert re.search(r"\nTask:\n", r["messages"][1]["content"])
    # executor examples are the agent calls as sent, with the reply as generated
    for r in executor_rows:
        assert r["messages"][0]["role"] == "system" and r["messages"][-1]["content"].endswith("</delivery>")

    manifest = json.loads((tmp_path / "manifest.json").read_text())
    acc = manifest["acceptance"]
    assert acc["designs"] == 3 * 4 and acc["valid_designs"] == 12 and acc["executions"] == 24
    assert acc["correct_executions"] == 18 and acc["execution_rate"] == 0.75  # every run of 3 of the 4 tasks
    assert manifest["executor_model"] == "scripted-executor" and manifest["mode"] == "template-only"
    assert sum(manifest["templates"]["used_in_kept_replies"].values()) == len(designer)
    assert manifest["agent_prompts"]["agents"] > 0


def test_keep_all_labels_incorrect_runs(tmp_path, pool):
    cfg = DistillConfig(
        out=str(tmp_path), template_only=True, rollout=rollout(m_designs=1, n_executions=1), keep_all=True
    )
    with Distiller(cfg, executor=ScriptedPolicy(executor_reply), pool=pool) as d:
        d.run(TASKS[:2])
    designer = lines(tmp_path / "designer.jsonl")
    assert {r["task_id"]: r["correct"] for r in designer} == {TASKS[0].id: True, TASKS[1].id: False}
    assert {r["correct"] for r in lines(tmp_path / "executor.jsonl") if r["task_id"] == TASKS[1].id} == {
        False
    }


def test_max_tasks_and_resume_skip_done_tasks(tmp_path, pool):
    cfg = DistillConfig(
        out=str(tmp_path), template_only=True, rollout=rollout(m_designs=1, n_executions=1), max_tasks=1
    )
    calls: list[str] = []

    def reply(request: ChatRequest) -> str:
        calls.append(request.messages[-1]["content"])
        return executor_reply(request)

    with Distiller(cfg, executor=ScriptedPolicy(reply), pool=pool) as d:
        first = d.run(TASKS[:3])
    assert first.processed == [TASKS[0].id] and first.skipped_done == 0
    n_first = len(calls)
    cfg.max_tasks = None
    with Distiller(cfg, executor=ScriptedPolicy(reply), pool=pool) as d:
        second = d.run(TASKS[:3])
    assert second.skipped_done == 1 and sorted(second.processed) == sorted(t.id for t in TASKS[1:3])
    assert not any(TASKS[0].question in c for c in calls[n_first:])  # the done task was not run again
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [r["tasks"] for r in manifest["runs"]] == [1, 2]


def test_config_errors_say_what_to_change(tmp_path):
    from metaagent.config import ConfigError

    with pytest.raises(ConfigError, match="frozen_designer"):
        DistillConfig(out=str(tmp_path), rollout={"frozen_designer": "single_math"})
    with pytest.raises(ConfigError, match="--max-tasks"):
        DistillConfig(out=str(tmp_path), max_tasks=0)
    with pytest.raises(ConfigError, match="teacher base_url"):
        from metaagent.distill import TeacherConfig

        TeacherConfig(base_url="api.deepseek.com")
    cfg = DistillConfig(out=str(tmp_path), template_only=True)
    assert cfg.rollout.k_templates == 1 and cfg.script_token_budget == 248
    assert isinstance(cfg.rollout.executor, SamplingConfig)
