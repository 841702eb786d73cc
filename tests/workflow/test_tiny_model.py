"""Every template runs to ok with a real (tiny, randomly initialised) transformers model."""

from __future__ import annotations

import pytest

from metaagent.data import Task
from metaagent.data.loaders import load_tasks
from metaagent.workflow import default_tools, load_templates

TEMPLATES = {t.name: t for t in load_templates()}
TASKS = {
    "math": Task(id="tiny-math", domain="math", question="What is 2 + 3?", answer="5"),
    "code": Task(
        id="tiny-code",
        domain="code",
        question="Read two integers and print their sum.",
        tests={"inputs": ["1 2\n"], "outputs": ["3\n"]},
        metadata={"public_tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]}},
    ),
}


@pytest.fixture(scope="module")
def tiny():
    from metaagent.policy.hf import HFPolicy

    return HFPolicy("tiny")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_runs_with_the_tiny_model(pool, tiny, name):
    template = TEMPLATES[name]
    domain = template.domains[0]
    # plan templates need a plan task: its env tools (env_observe, env_step) come from the task's environment
    task = load_tasks({"source": "planpath", "split": "test", "limit": 1, "env": {"size": 5}})[0] if domain == "plan" else TASKS[domain]
    ex = pool.run(
        template.source,
        task,
        tiny,
        {"timeout_s": 30},
        sampling={"max_tokens": 8},
        tools=default_tools(task),
        seed=3,
    )
    assert ex.status == "ok", ex.error
    assert ex.answer is not None and ex.turns
    for turn in ex.turns:
        assert turn.model == tiny.model_id
        assert 0 < len(turn.response_ids) <= 8 and len(turn.logprobs) == len(turn.response_ids)
        assert all(lp <= 0.0 for lp in turn.logprobs)
        assert turn.prompt_ids and turn.messages[0]["role"] == "system"


@pytest.mark.slow
def test_tiny_model_executions_are_reproducible_with_a_seed(pool, tiny):
    source = TEMPLATES["reflection"].source
    a, b = (pool.run(source, TASKS["math"], tiny, sampling={"max_tokens": 8}, seed=21) for _ in range(2))
    assert [t.response_ids for t in a.turns] == [t.response_ids for t in b.turns]
    assert a.answer == b.answer
