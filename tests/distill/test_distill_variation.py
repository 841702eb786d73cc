"""Template variants: valid, same structure and control flow, format instructions kept, task-specific."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from metaagent.data import load_bundled
from metaagent.distill.variation import (
    CONTROL_WORDS,
    choose_variant,
    fenced,
    instantiate,
    task_facts,
)
from metaagent.workflow import analyze_script, check_script, extract_script, load_templates

TEMPLATES = load_templates()
TASKS = load_bundled("train")
FORMAT_PHRASES = ("\\boxed{}", "```python block", "CORRECT", "VALID", "INVALID")


def _sample_tasks(domain: str, n: int) -> list:
    pool = [t for t in TASKS if t.domain == domain]
    return random.Random(0).sample(pool, min(n, len(pool)))


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.name)
def test_variants_keep_structure_control_flow_and_format(template):
    changed = 0
    tasks = [t for d in template.domains for t in _sample_tasks(d, 12)]
    base = analyze_script(template.source)
    for i, task in enumerate(tasks):
        v = instantiate(template, task, random.Random(i))
        assert check_script(v.script).ok, v.script
        got = analyze_script(v.script)
        for key in (
            "structure",
            "pattern",
            "num_agents",
            "num_call_sites",
            "loops",
            "uses_parallel",
            "tools",
            "submits",
        ):
            assert got[key] == base[key], (key, v.script)
        assert len(set(got["roles"])) == len(got["roles"])  # role names stay distinct
        for word in CONTROL_WORDS:  # what the control flow tests replies for
            assert len(re.findall(rf"\b{word}\b", v.script)) == len(
                re.findall(rf"\b{word}\b", template.source)
            )
        for old, new in zip(base["system_prompts"], got["system_prompts"]):
            for phrase in FORMAT_PHRASES:
                if phrase in old:
                    assert phrase in new, (phrase, new)
        # only the Agent(...) literals change: the script minus its string literals is the template's
        strip = lambda s: re.sub(r'"(?:[^"\\]|\\.)*"', '""', s)
        assert strip(v.script) == strip(template.source)
        changed += v.changed
    assert changed >= len(tasks) // 2  # variation actually varies


def test_variants_are_deterministic_per_rng_and_task_specific():
    t = next(t for t in TEMPLATES if t.name == "reflection")
    task = next(x for x in TASKS if x.domain == "math")
    assert instantiate(t, task, random.Random(5)).script == instantiate(t, task, random.Random(5)).script
    assert instantiate(t, task, random.Random(5), vary=False).script == t.source
    # across many tasks most agent prompts are byte-unique (the paper reports 77.5% for its data)
    prompts = []
    for i, task in enumerate(x for x in TASKS if x.domain == "math"):
        prompts += analyze_script(instantiate(t, task, random.Random(i)).script)["system_prompts"]
    counts = Counter(prompts)
    assert sum(1 for p in prompts if counts[p] == 1) / len(prompts) > 0.5


def test_task_facts_read_the_task():
    by_q = {t.question: t for t in TASKS}
    arithmetic = next(t for q, t in by_q.items() if re.fullmatch(r"What is \d+ \+ \d+\?", q))
    f = task_facts(arithmetic)
    assert f.topic == "arithmetic" and any(arithmetic.question[8:-1] in s for s in f.focus)
    code = next(t for t in load_bundled("all") if t.domain == "code" and "`are_anagrams(" in t.question)
    f = task_facts(code)
    assert f.focus[0] == "Define are_anagrams(a, b) exactly as the task specifies."
    stdin = next(t for t in TASKS if t.domain == "code" and "standard input" in t.question)
    assert task_facts(stdin).topic == "input/output programs"


def test_no_focus_sentence_for_agents_told_not_to_solve():
    planner = next(t for t in TEMPLATES if t.name == "plan_solve")
    task = next(t for t in TASKS if t.domain == "math" and task_facts(t).focus)
    for i in range(30):
        prompts = analyze_script(instantiate(planner, task, random.Random(i)).script)["system_prompts"]
        assert not any(s in prompts[0] for s in task_facts(task).focus)  # the Planner "does not solve it"


def test_choose_variant_respects_the_budget_and_domain():
    task = next(t for t in TASKS if t.domain == "code")
    rng = random.Random(0)
    for _ in range(20):
        v = choose_variant(TEMPLATES, task, rng, fits=lambda s: len(s) < 400)
        assert v is not None and len(v.script) < 400
        assert "code" in next(t for t in TEMPLATES if t.name == v.template).domains
    assert choose_variant(TEMPLATES, task, rng, fits=lambda s: False) is None
    reply = fenced("x = 1\n")
    assert reply == "```python\nx = 1\n```" and extract_script(reply) == "x = 1\n"
