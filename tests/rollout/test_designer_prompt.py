"""The two designer prompt styles: one builder for every caller, and ``auto`` following the model's training;
the domain sentence (``rollout.domain_hint``, issue 62) on and off."""

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
    domain_hint_of_examples,
    prompt_domain_hint,
    prompt_style,
    resolve_designer_prompt,
    resolve_domain_hint,
    trained_designer_prompt,
    trained_domain_hint,
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
    assert json.loads((tmp_path / PROMPT_FILE).read_text()) == {"designer_prompt": "compact", "domain_hint": "on"}
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


CODE_TASK = Task(id="c1", domain="code", question="Read n and print n + 1.", answer=None, source="test", split="adhoc")


@pytest.mark.parametrize("task", [TASK, CODE_TASK], ids=["math", "code"])
def test_the_domain_sentence_is_on_or_off_in_both_styles(task):
    from metaagent.domain import get_domain

    hint = get_domain(task.domain).answer_hint
    compact_on = designer_messages(task, [], style="compact")[1]["content"]
    compact_off = designer_messages(task, [], style="compact", domain_hint=False)[1]["content"]
    assert compact_on == f"Task domain: {task.domain}.\n\nTask:\n{task.question}"
    assert compact_off == f"Task:\n{task.question}"
    full_on = designer_messages(task, [], style="full")[1]["content"]
    full_off = designer_messages(task, [], style="full", domain_hint=False)[1]["content"]
    assert full_on.startswith(f"Task domain: {task.domain}. {hint}\n\nTask:\n")
    assert full_off.startswith(f"{hint}\n\nTask:\n")  # the answer's format stays, the label goes
    assert "Task domain" not in compact_off + full_off and task.domain not in full_off.split("Task:")[0]
    assert full_off == full_on.replace(f"Task domain: {task.domain}. ", "", 1)
    assert [prompt_domain_hint(designer_messages(task, [], style=s, domain_hint=h)) for s in ("compact", "full")
            for h in (True, False)] == [True, False, True, False]  # fmt: skip


def test_no_domain_hint_with_a_domain_without_an_answer_hint_drops_the_line():
    from metaagent.domain import get_domain

    task = Task(id="p1", domain="plan", question="Plan a path.", answer=None, source="test", split="adhoc")
    assert get_domain("plan").answer_hint == ""
    off = designer_messages(task, [], style="full", domain_hint=False)[1]["content"]
    assert off == "Task:\nPlan a path.\n\nWrite the workflow script for this task."


def test_no_built_in_answer_hint_names_its_domain():
    """``domain_hint: off`` keeps the answer hint, so a hint naming its domain would bring the label back."""
    import re

    from metaagent.domain import get_domain

    for name in ("math", "code", "qa", "plan"):
        assert not re.search(rf"\b{name}\b", get_domain(name).answer_hint, re.IGNORECASE), name


def test_domain_hint_config_accepts_on_off_and_yaml_booleans_only(tmp_path):
    from metaagent.config import load_config
    from metaagent.train.config import TrainConfig

    assert RolloutConfig().domain_hint == "auto"
    assert [RolloutConfig(domain_hint=v).domain_hint for v in ("on", "off", True, False)] == ["on", "off", "on", "off"]
    path = tmp_path / "c.yaml"
    path.write_text("rollout:\n  domain_hint: off\n")  # YAML 1.1 reads a bare off as false
    assert load_config(TrainConfig, path).rollout.domain_hint == "off"
    assert load_config(TrainConfig, None, ["rollout.domain_hint=on"]).rollout.domain_hint == "on"
    for bad in ("maybe", 1, "none"):
        with pytest.raises(ConfigError, match="domain_hint"):
            RolloutConfig(domain_hint=bad)
    with pytest.raises(ValueError, match="domain_hint"):
        resolve_domain_hint("yes")


def test_domain_hint_auto_follows_the_model_folder(tmp_path):
    policy = ScriptedPolicy(["x"], model_id=str(tmp_path))
    assert trained_domain_hint(str(tmp_path)) is None and resolve_domain_hint("auto", policy) is True
    (tmp_path / PROMPT_FILE).write_text('{"designer_prompt": "compact"}\n')  # written before the key existed
    assert trained_domain_hint(str(tmp_path)) is True and resolve_domain_hint("auto", policy) is True
    write_designer_prompt(tmp_path, "compact", domain_hint=False)
    assert json.loads((tmp_path / PROMPT_FILE).read_text()) == {"designer_prompt": "compact", "domain_hint": "off"}
    assert resolve_domain_hint("auto", policy) is False and resolve_domain_hint("on", policy) is True
    assert resolve_designer_prompt("auto", policy) == "compact"  # the style is still read


def test_domain_hint_of_examples_is_one_or_none():
    on = {"kind": "designer", "messages": designer_messages(TASK, [], style="compact")}
    off = {"kind": "designer", "messages": designer_messages(TASK, [], style="compact", domain_hint=False)}
    e = {"kind": "executor", "messages": [{"role": "user", "content": "Task domain: math."}]}
    assert domain_hint_of_examples([off, off, e]) is False
    assert domain_hint_of_examples([on, e]) is True
    assert domain_hint_of_examples([on, off]) is None and domain_hint_of_examples([e]) is None
    tricky = Task(id="t", domain="math", question="Task domain: x.\n\nWhat is 1 + 1?", answer="2", source="test")
    assert prompt_domain_hint(designer_messages(tricky, [], style="compact", domain_hint=False)) is False


@pytest.mark.parametrize("setting", ["on", "off", "auto"])
def test_engine_sends_the_configured_domain_hint(tmp_path, setting):
    write_designer_prompt(tmp_path, "compact", domain_hint=False)  # the designer model was trained without it
    seen = []

    def designer(request):
        seen.append(request.messages)
        return f"```python\n{SCRIPT}\n```"

    executor = ScriptedPolicy(lambda r: "2 + 3 = 5 <delivery>\\boxed{5}</delivery>")
    config = RolloutConfig(m_designs=2, n_executions=1, domain_hint=setting)
    with SandboxPool(workers=1) as pool:
        engine = RolloutEngine(ScriptedPolicy(designer, model_id=str(tmp_path)), executor, config=config, pool=pool)
        tree = engine.rollout([TASK], seed=0)[0]
    want = setting == "on"
    assert engine.domain_hint is want
    assert [prompt_domain_hint(m) for m in seen] == [want, want]
    assert all(("Task domain: math." in d.sample.messages[1]["content"]) is want for d in tree.designs)
