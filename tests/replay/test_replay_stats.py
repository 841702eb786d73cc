"""--stats: structure shares, role names, byte-unique prompts, validity, executions (Tables 6, 9, 10)."""

from __future__ import annotations

from collections import Counter

import pytest
from replay_helpers import answering_policy

from metaagent.data import load_bundled
from metaagent.policy import ScriptedPolicy
from metaagent.records import write_trees
from metaagent.replay import ReplayError, load_run, stats
from metaagent.rollout.config import RolloutConfig
from metaagent.rollout.engine import RolloutEngine

SINGLE = 'adder = Agent("Adder", "Add the numbers of task zero.")\nsubmit(adder(task))\n'
REVISE = (
    'solver = Agent("Solver", "Shared prompt.")\nchecker = Agent("Checker", "Check task zero.")\n'
    'draft = solver(task)\nreview = checker(draft)\nsubmit(solver(f"Revise: {review}"))\n'
)
SHARED = 'solver = Agent("Solver", "Shared prompt.")\nsubmit(solver(task))\n'


@pytest.fixture(scope="module")
def designer_run(tmp_path_factory, sandbox_pool):
    """Designer-written scripts (a scripted designer through the real engine, checker and analysis):
    two tasks x two designs; three valid scripts and one reply without a script."""
    tasks = load_bundled("train", "math")[:2]
    replies = [
        f"```python\n{SINGLE}```",
        f"Here:\n```python\n{REVISE}```",
        f"```python\n{SHARED}```",
        "I would rather not.",
    ]
    engine = RolloutEngine(
        designer=ScriptedPolicy(replies, model_id="scripted-designer"),
        executor=answering_policy({tasks[0].id}, tasks),
        config=RolloutConfig(m_designs=2, n_executions=1, sandbox_workers=2, max_inflight=4),
        pool=sandbox_pool,
        run_id="designed",
    )
    trees = engine.rollout(tasks, step=0, seed=0)
    path = tmp_path_factory.mktemp("designed") / "rollouts" / "step_000000.jsonl"
    write_trees(path, trees)
    return load_run(path.parent.parent)


def test_designer_workflows_give_validity_roles_and_unique_prompts(designer_run):
    st = stats(designer_run)
    invalid = [d for r in designer_run.refs for d in r.tree.designs if not d.valid]
    assert len(invalid) == 1 and invalid[0].sample.text == "I would rather not."
    assert st["workflows_from"] == "designer" and st["designs_by_source"] == {"designer": 4}
    assert st["valid_script_rate"] == 0.75 and st["workflows"] == 3
    assert st["invalid_reasons"] == {invalid[0].check.errors[0].code: 1}
    # agents: Adder (unique prompt), Solver + Checker (shared + unique), Solver (shared)
    assert st["roles"] == {"agents": 4, "distinct": 3, "top": [["Solver", 2], ["Adder", 1], ["Checker", 1]]}
    assert st["system_prompts"] == {"agents": 4, "known": 4, "unknown": 0, "unique": 2, "unique_share": 0.5}
    assert st["structure_share"]["family"]["bundled"] == {"single": 2 / 3, "reflection": 1 / 3}
    assert st["workflow"]["mean_agents"] == pytest.approx(4 / 3)
    assert st["workflow"]["mean_agent_calls"] == pytest.approx((1 + 3 + 1) / 3)
    # the executor answers task 0 right and task 1 wrong
    assert st["reward"]["ALL"]["correct_rate"] == pytest.approx(2 / 3)
    assert st["executions"]["by_status"]["ok"] == 3


@pytest.mark.slow
def test_tiny_run_statistics_match_the_records(tiny_runs):
    run = load_run(tiny_runs["a"])
    st = stats(run)
    designs = [d for r in run.refs for d in r.tree.designs]
    designer = [d for d in designs if d.source == "designer"]
    frozen = [d for d in designs if d.source.startswith("frozen:")]
    # the tiny random model never writes a valid script: a real case the statistics must show
    assert designer and st["valid_script_rate"] == 0.0
    assert sum(st["invalid_reasons"].values()) == len(designer)
    assert st["designs_by_source"] == {"designer": len(designer), "frozen": len(frozen)}
    assert st["workflows_from"] == "all" and st["workflows"] == len(frozen)

    family = Counter(d.structure["family"] for d in frozen)
    assert st["structure_share"]["family"]["ALL"] == pytest.approx(
        {k: v / len(frozen) for k, v in family.items()}
    )
    for level in ("family", "structure", "pattern"):
        for bench, shares in st["structure_share"][level].items():
            assert sum(shares.values()) == pytest.approx(1.0), (level, bench)
    assert set(st["structure_share_by_domain"]["family"]) == {"math", "code", "ALL"}

    reflection = sum(1 for d in frozen if d.source == "frozen:template:reflection")
    assert ["MathCritic", reflection] in st["roles"]["top"]
    # every frozen template ran on both tasks of its domain, so no prompt is byte-unique
    assert st["system_prompts"]["unique"] == 0 and st["system_prompts"]["known"] > 0

    executions = [e for d in frozen for e in d.executions]
    assert st["executions"]["total"] == len(executions) == sum(st["executions"]["by_status"].values())
    assert st["workflow"]["mean_agent_calls"] == pytest.approx(
        sum(len(e.turns) for e in executions) / len(executions)
    )
    assert st["workflow"]["mean_tool_calls"] > 0  # solver_tester runs the public tests


@pytest.mark.slow
def test_statistics_of_one_kind_and_source(tiny_runs):
    run = load_run(tiny_runs["a"])
    val = stats(run.view(kind="val"))
    assert val["trees"] == 1 and val["workflows"] == 1 and val["kinds"] == ["val"]
    assert val["structure_share"]["pattern"]["ALL"] == {"single": 1.0}
    only_designer = stats(run, source="designer")
    assert only_designer["workflows"] == 0 and only_designer["structure_share"]["family"] == {}
    with pytest.raises(ReplayError, match="source must be one of"):
        stats(run, source="teacher")
