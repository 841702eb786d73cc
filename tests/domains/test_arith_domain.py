"""A domain is one file (arith_domain.py): once loaded, tasks of it are built, scored, and trained on through
the CLI, and nothing in the package names it. An unknown domain is one error naming the registered ones."""

from __future__ import annotations

import json

import pytest

import metaagent.domain as registry
from metaagent.data import Task, TaskError
from metaagent.domain import DomainError, domain_names, get_domain, register_domain
from metaagent.records import AgentTurn, Execution
from metaagent.rewards import score_execution, solution_format

QUESTIONS = {"What is 2 + 3?": "5", "What is 3 + 4?": "7"}


@pytest.fixture
def plugin(monkeypatch):
    """``arith`` loaded the way a user loads it (METAAGENT_DOMAINS), and unregistered afterwards."""
    import sys

    saved, loaded = dict(registry._DOMAINS), set(registry._loaded)
    monkeypatch.setenv(registry.PLUGINS_ENV, "arith_domain")
    sys.modules.pop("arith_domain", None)
    yield get_domain("arith")
    registry._DOMAINS.clear()
    registry._DOMAINS.update(saved)
    registry._loaded.clear()
    registry._loaded.update(loaded)
    sys.modules.pop("arith_domain", None)


def _execution(answer: str) -> Execution:
    turn = AgentTurn(
        index=0, role="Solver", system_prompt="", messages=[], response=f"<delivery>{answer}</delivery>",
        delivery=answer, prompt_ids=[], response_ids=[], logprobs=None, finish_reason="stop", model="m",
    )  # fmt: skip
    return Execution(index=0, status="ok", answer=answer, submitted=True, turns=[turn])


def test_unknown_domain_names_the_registered_ones_and_how_to_add_one():
    with pytest.raises(TaskError, match=r"unknown domain 'arith'; registered: \['code', 'math', 'plan', 'qa'\].*register_domain.*METAAGENT_DOMAINS"):
        Task(id="t", domain="arith", question="What is 2 + 3?", answer="5")
    with pytest.raises(DomainError, match="unknown domain 'poetry'"):
        solution_format("poetry", "x")


def test_a_loaded_domain_builds_scores_and_formats_its_tasks(plugin):
    assert "arith" in domain_names() and plugin.name == "arith"
    task = Task(id="t", domain="arith", question="What is 2 + 3?", answer="5")
    with pytest.raises(TaskError, match="a arith task needs its gold answer"):
        Task(id="u", domain="arith", question="What is 2 + 3?", answer="five")
    right, wrong = score_execution(task, _execution("It is 5")), score_execution(task, _execution("It is 6"))
    assert right.correct == 1.0 and right.details["arith"] == {"pred": 5, "gold": "5"}
    assert wrong.correct == 0.0 and wrong.components["solution_format"] == 1.0
    assert score_execution(task, _execution("no idea")).components["solution_format"] == 0.0
    with pytest.raises(DomainError, match="already registered"):
        register_domain(registry.Domain(name="arith", reference="x", has_reference=bool, score=None, solution_format=None))


def _reply(request) -> str:
    """The designer writes a one-agent script; the agent answers 2 + 3 right and 3 + 4 wrong (off by one)."""
    from warm_tiny import SCRIPT

    if request.role == "designer":
        return f"```python\n{SCRIPT}```"
    text = request.messages[-1]["content"]
    a, b = map(int, text.split("What is ")[1].rstrip("?").split(" + "))
    return f"<delivery>{a + b + (a % 2)}</delivery>"


@pytest.mark.slow
def test_the_domain_trains_one_step_through_the_cli(plugin, tmp_path, monkeypatch):
    """``train-metaagent --config tiny`` on a local jsonl of arith tasks: one step, rewards by the arith scorer
    (one task always right, one always wrong: mean correctness exactly 0.5)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
    from builders import forced_generate

    from metaagent.cli.train import main
    from metaagent.learn.metrics import read_metrics
    from metaagent.policy.hf import HFPolicy

    monkeypatch.setattr(HFPolicy, "_generate", forced_generate(_reply))
    tasks = tmp_path / "arith.jsonl"
    rows = [{"id": f"arith-{i}", "domain": "arith", "question": q, "answer": a, "source": "arith", "split": "train"}
            for i, (q, a) in enumerate(QUESTIONS.items())]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as done:
        main(["--config", "tiny", f"data.train=[{{source: bundled, path: '{tasks}'}}]", "data.val=[]",
              "trainer.steps=1", "trainer.save_every=0", f"trainer.out={out}", "rollout.sandbox_workers=2"])  # fmt: skip
    assert done.value.code in (0, None)
    rows = [r for r in read_metrics(out / "metrics.jsonl")[0] if r["step"] >= 0]
    assert len(rows) == 1
    assert rows[0]["rollout/correct"] == pytest.approx(0.5)
    assert rows[0]["rollout/reward_errors"] == 0
