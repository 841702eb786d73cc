"""The two designer prompt styles: one builder for every caller, and ``auto`` following the model's training."""

from __future__ import annotations

import json

import pytest

from metaagent.config import ConfigError
from metaagent.data import Task
from metaagent.policy import ScriptedPolicy
from metaagent.policy.models import PROMPT_FILE
from metaagent.rollout.config import RolloutConfig
from metaagent.rollout.engine import RolloutEngine
from metaagent.rollout.prompts import (
    COMPACT_API,
    designer_messages,
    designer_prompt_of_examples,
    prompt_style,
    resolve_designer_prompt,
    trained_designer_prompt,
    write_designer_prompt,
)
from metaagent.workflow import SandboxPool, load_templates

TASK = Task(id="m1", domain="math", question="What is 2 + 3?", answer="5", source="test")
SCRIPT = 'solver = Agent("Adder", "You add. Put the answer in \\\\boxed{}.")\nsubmit(solver(task))'


def test_compact_prompt_is_short_and_has_no_examples():
    from metaagent.policy.models import load_tokenizer

    templates = load_templates()
    full = designer_messages(TASK, templates[:1])
    compact = designer_messages(TASK, templates[:1], style="compact")  # examples are ignored
    tok = load_tokenizer("tiny")
    n_full = len(tok.encode(tok.apply_chat_template(full, tokenize=False)))
    n_compact = len(tok.encode(tok.apply_chat_template(compact, tokenize=False)))
    assert n_compact < 300 < 1000 < n_full
    assert compact[0]["content"] == COMPACT_API and "Example" not in compact[1]["content"]
    assert TASK.question in compact[1]["content"] and "Task domain: math" in compact[1]["content"]
    for name in ("Agent(", "parallel(", "submit(", "boxed(", "majority(", "run_tests(", "run_program("):
        assert name in COMPACT_API
    assert prompt_style(compact) == "compact" and prompt_style(full) == "full"
    assert prompt_style([{"role": "system", "content": "other"}]) is None
    with pytest.raises(ValueError, match="compact"):
        designer_messages(TASK, [], style="tiny")


def test_style_of_examples_is_one_or_none():
    c = {"kind": "designer", "messages": designer_messages(TASK, [], style="compact")}
    f = {"kind": "designer", "messages": designer_messages(TASK, [])}
    e = {"kind": "executor", "messages": [{"role": "system", "content": "x"}]}
    assert designer_prompt_of_examples([c, c, e]) == "compact"
    assert designer_prompt_of_examples([f, e]) == "full"
    assert designer_prompt_of_examples([c, f]) is None
    assert designer_prompt_of_examples([e]) is None


def test_auto_follows_the_model_folder(tmp_path):
    assert trained_designer_prompt(str(tmp_path)) is None
    assert resolve_designer_prompt("auto", ScriptedPolicy(["x"], model_id=str(tmp_path))) == "full"
    write_designer_prompt(tmp_path, "compact")
    assert json.loads((tmp_path / PROMPT_FILE).read_text()) == {"designer_prompt": "compact"}
    assert resolve_designer_prompt("auto", ScriptedPolicy(["x"], model_id=str(tmp_path))) == "compact"
    assert resolve_designer_prompt("full", ScriptedPolicy(["x"], model_id=str(tmp_path))) == "full"
    with pytest.raises(ConfigError, match="designer_prompt"):
        RolloutConfig(designer_prompt="short")


@pytest.mark.parametrize("style", ["full", "compact", "auto"])
def test_engine_sends_the_configured_prompt(tmp_path, style):
    write_designer_prompt(tmp_path, "compact")
    seen = []

    def designer(request):
        seen.append(request.messages)
        return f"```python\n{SCRIPT}\n```"

    executor = ScriptedPolicy(lambda r: "2 + 3 = 5 <delivery>\\boxed{5}</delivery>")
    config = RolloutConfig(m_designs=2, n_executions=1, k_templates=1, designer_prompt=style)
    with SandboxPool(workers=1) as pool:
        engine = RolloutEngine(ScriptedPolicy(designer, model_id=str(tmp_path)), executor, config=config, pool=pool)
        tree = engine.rollout([TASK], seed=0)[0]
    want = "full" if style == "full" else "compact"
    assert engine.designer_prompt == want
    assert [prompt_style(m) for m in seen] == [want, want]
    assert all(d.valid for d in tree.designs)
    assert all(d.sample.templates == ([] if want == "compact" else d.sample.templates) for d in tree.designs)
    if want == "full":
        assert all(len(d.sample.templates) == 1 for d in tree.designs)
