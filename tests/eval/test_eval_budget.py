"""``metaagent-eval --budget LOW|HIGH``: every designer prompt carries the tag, and under LOW every execution of
every method is capped at ``--low-max-calls`` agent calls (cut there, scored as it stands); the budget is part of
a results directory's settings. A scripted model: nothing here depends on what a model samples."""

from __future__ import annotations

import pytest

from metaagent.eval import EvalError, Evaluation, make_config
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.records import read_trees
from metaagent.rollout.budget import BUDGET_LINES
from metaagent.workflow import SandboxPool

TEAM = 'a = Agent("Solver", "Solve it.")\nb = Agent("Checker", "Check it.")\nsubmit(b(a(task)))\n'


def reply(request: ChatRequest) -> str:
    if request.role == "designer":
        return f"```python\n{TEAM}```"
    return "<delivery>\\boxed{0}</delivery>"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


def _run(out, pool, **kw):
    values = dict(
        models=["scripted"], benchmarks=["bundled:test/math"], limit=2, n=2, out=str(out), bootstrap=200,
        concurrency=2, html=False, methods=["auto", "sa"],
    )  # fmt: skip
    values.update(kw)
    return Evaluation(make_config(**values), policies={"scripted": ScriptedPolicy(reply, model_id="scripted")}, pool=pool).run()


def _trees(out, method):
    (path,) = (out / "rollouts").rglob(f"{method}.jsonl")
    return read_trees(path)[0]


def test_low_tags_every_designer_prompt_and_caps_every_execution(tmp_path, pool):
    out = tmp_path / "low"
    results = _run(out, pool, budget="LOW")
    entries = results["cells"]["scripted"]["benchmarks"]["bundled:test/math"]
    assert entries["auto"]["budget"]["agent_calls_per_sample"] == 1.0  # the two-agent team cut at one call
    assert entries["sa"]["budget"]["agent_calls_per_sample"] == 1.0
    for tree in _trees(out, "auto"):
        assert tree.budget == "LOW"
        for d in tree.designs:
            assert BUDGET_LINES["LOW"] in d.sample.messages[-1]["content"]
            assert [(e.status, len(e.turns)) for e in d.executions] == [("limit", 1)]
    assert all(t.budget == "LOW" for t in _trees(out, "sa"))


def test_high_tags_without_a_cap_and_the_budget_is_part_of_the_settings(tmp_path, pool):
    out = tmp_path / "high"
    results = _run(out, pool, budget="HIGH")
    entries = results["cells"]["scripted"]["benchmarks"]["bundled:test/math"]
    assert entries["auto"]["budget"]["agent_calls_per_sample"] == 2.0
    assert all(BUDGET_LINES["HIGH"] in d.sample.messages[-1]["content"] for t in _trees(out, "auto") for d in t.designs)
    with pytest.raises(EvalError, match="budget: 'HIGH' != 'LOW'"):
        _run(out, pool, budget="LOW")
    plain = _run(tmp_path / "plain", pool)
    assert plain["cells"]["scripted"]["benchmarks"]["bundled:test/math"]["auto"]["budget"]["agent_calls_per_sample"] == 2.0
    assert all(t.budget is None for t in _trees(tmp_path / "plain", "auto"))


def test_a_bad_budget_is_a_one_line_error():
    from metaagent.config import ConfigError

    with pytest.raises(ConfigError, match="budget"):
        make_config(budget="MEDIUM")
    with pytest.raises(ConfigError, match="low_max_calls"):
        make_config(low_max_calls=0)
