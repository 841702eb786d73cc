"""Teacher-free cold-start data: designer examples balanced over structures and written for each task,
executor examples that are correct and well formatted."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from builders import sample_tasks

from metaagent.distill.cold_start_data import (
    designer_examples,
    executor_examples,
    format_reply,
    structure_classes,
    thin_structures,
)
from metaagent.distill.variation import instantiate
from metaagent.rollout.prompts import prompt_style
from metaagent.workflow import analyze_script, check_script, extract_script, load_templates

TASKS = sample_tasks(4, 1)


def test_designer_examples_are_valid_balanced_and_task_specific():
    templates = load_templates()
    rows = designer_examples(TASKS, templates, per_task=12, seed=0, style="compact")
    assert len(rows) >= 50
    for row in rows:
        assert prompt_style(row["messages"][:-1]) == "compact"
        script = extract_script(row["messages"][-1]["content"])
        assert script is not None and check_script(script).ok, script
        assert analyze_script(script)["structure"] == row["structure"]
    math_classes = set(structure_classes(templates, "math"))
    by_structure = Counter(r["structure"] for r in rows if r["domain"] == "math")
    assert set(by_structure) == math_classes and len(math_classes) >= 4
    assert max(by_structure.values()) <= 2 * min(by_structure.values())  # balanced within the domain
    prompts = Counter(p for r in rows for p in analyze_script(extract_script(r["messages"][-1]["content"]))["system_prompts"])
    unique = sum(1 for c in prompts.values() if c == 1) / sum(prompts.values())
    assert unique > 0.4
    apples = " ".join(r["messages"][-1]["content"] for r in rows if r["task_id"] == "m0")
    assert "apples" in apples  # prompts written for the task's content
    assert "count_vowels" in " ".join(r["messages"][-1]["content"] for r in rows if r["task_id"] == "c0")
    again = designer_examples(TASKS, templates, per_task=12, seed=0, style="compact")
    assert [r["id"] for r in again] == [r["id"] for r in rows]  # deterministic


def test_structural_variants_change_counts_but_not_the_structure():
    bank = {t.name: t for t in load_templates()}
    counts, rounds, agents = set(), set(), set()
    for s in range(40):
        rng = random.Random(s)
        v = instantiate(bank["self_consistency"], TASKS[0], rng, structural=True)
        counts.add(v.script.split("[task] * ")[1][0])
        w = instantiate(bank["reflection"], TASKS[0], rng, structural=True)
        rounds.add(w.script.split("range(")[1][0])
        x = instantiate(bank["ensemble_judge"], TASKS[0], rng, structural=True)
        agents.add(analyze_script(x.script)["num_agents"])
        for script, name in ((v.script, "self_consistency"), (w.script, "reflection"), (x.script, "ensemble_judge")):
            assert check_script(script).ok
            assert analyze_script(script)["structure"] == bank[name].structure
    assert len(counts) >= 3 and len(rounds) >= 2 and len(agents) >= 2


def test_executor_replies_are_cut_at_the_answer_and_delivered():
    assert format_reply("First 12 + 5 = 17. So he has 17. Extra text.", "17") == (
        "First 12 + 5 = 17.\n<delivery>\\boxed{17}</delivery>"
    )
    assert format_reply("The answer is 170.", "17") is None  # 170 is not 17
    assert format_reply("It is 1.5 apples", "1") is None
    row = {
        "kind": "executor",
        "task_id": "m2",
        "correct": True,
        "domain": "math",
        "level": 1,
        "seed": 0,
        "structure": "single",
        "pattern": "single",
        "design": 0,
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "What is 7 * 8?"},
            {"role": "assistant", "content": "7 times 8 is 56. I think so."},
        ],
    }
    wrong = {**row, "messages": [*row["messages"][:2], {"role": "assistant", "content": "It is 54."}]}
    rows, counts = executor_examples([row, row, wrong, {**row, "correct": False}], TASKS)
    assert [r["messages"][-1]["content"] for r in rows] == ["7 times 8 is 56.\n<delivery>\\boxed{56}</delivery>"]
    assert counts["kept"] == 1 and counts["dropped: duplicate"] == 1
    assert counts["dropped: reply does not state the answer"] == 1
    assert counts["dropped: not from a correct execution"] == 1


def test_thin_structures_keeps_a_seeded_fraction_of_one_class_only():
    rows = designer_examples(TASKS, load_templates(), per_task=10, seed=0)
    before = Counter(r["structure"] for r in rows)
    thinned = thin_structures(rows, {"single": 0.5}, seed=0)
    after = Counter(r["structure"] for r in thinned)
    assert {k: v for k, v in after.items() if k != "single"} == {k: v for k, v in before.items() if k != "single"}
    assert 0 < after["single"] < before["single"]
    assert thinned == thin_structures(rows, {"single": 0.5}, seed=0)  # seeded
    assert thin_structures(rows, {"single": 0.0}) == [r for r in rows if r["structure"] != "single"]
    with pytest.raises(ValueError, match="keep fractions must be in"):
        thin_structures(rows, {"single": 1.5})


def test_plain_designer_examples_have_no_f_strings_and_the_same_structures():
    templates = load_templates()
    plain = designer_examples(TASKS, templates, per_task=6, seed=0, style="compact", plain=True)
    usual = designer_examples(TASKS, templates, per_task=6, seed=0, style="compact")
    assert [r["structure"] for r in plain] == [r["structure"] for r in usual]
    scripts = [extract_script(r["messages"][-1]["content"]) for r in plain]
    assert all(check_script(s).ok for s in scripts)
    assert not any('f"' in s for s in scripts)
    assert any('f"' in extract_script(r["messages"][-1]["content"]) for r in usual)
