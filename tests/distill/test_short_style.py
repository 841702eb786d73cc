"""``make_cold_start_data.py --short``: the short template bank and short designer replies (issue #19, v4);
``--suite-families``."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from statistics import mean

from builders import sample_tasks

from metaagent.distill.cold_start_data import designer_examples, structure_classes
from metaagent.distill.short_style import SHORT_TEMPLATES
from metaagent.distill.variation import ROLE_ADVICE, TOPIC_INTROS
from metaagent.workflow import analyze_script, check_script, extract_script, load_templates

TASKS = sample_tasks(5, 2)


def test_short_bank_covers_the_banks_structure_classes_and_each_template_checks():
    for t in SHORT_TEMPLATES:
        assert check_script(t.source).ok, t.name
        analysis = analyze_script(t.source)
        assert (analysis["structure"], analysis["pattern"]) == (t.structure, t.pattern), t.name
        assert 'f"' not in t.source  # plain style
    bank = load_templates()
    for domain in ("math", "code"):
        assert set(structure_classes(SHORT_TEMPLATES, domain)) == set(structure_classes(bank, domain))


def test_short_replies_check_are_shorter_balanced_and_name_the_task():
    normal = designer_examples(TASKS, load_templates(), per_task=12, seed=0)
    short = designer_examples(TASKS, load_templates(), per_task=12, seed=0, short=True)
    assert len(short) >= 0.9 * len(normal)
    advice = {s for sentences in ROLE_ADVICE.values() for s in sentences}
    intros = {i.split("{")[0] for i in TOPIC_INTROS}
    for row in short:
        reply = row["messages"][-1]["content"]
        script = extract_script(reply)
        assert script is not None and check_script(script).ok, script
        assert analyze_script(script)["structure"] == row["structure"]
        assert row["template"].startswith("short_") and 'f"' not in script
        assert not any(a in reply for a in advice) and not any(i in reply for i in intros), reply
    # the same (task, design) gets the same structure class; short replies are shorter in every class
    by_key = {(r["task_id"], r["design"]): r for r in normal}
    pairs = [(r, by_key[(r["task_id"], r["design"])]) for r in short if (r["task_id"], r["design"]) in by_key]
    assert len(pairs) >= 0.8 * len(short) and all(s["structure"] == n["structure"] for s, n in pairs)
    for structure in {s["structure"] for s, _ in pairs}:
        lengths = [
            (len(s["messages"][-1]["content"]), len(n["messages"][-1]["content"]))
            for s, n in pairs
            if s["structure"] == structure
        ]
        assert mean(a for a, _ in lengths) < 0.8 * mean(b for _, b in lengths), structure
    assert max(len(r["messages"][-1]["content"]) for r in short) < 600  # ~150 tokens
    for domain in ("math", "code"):
        counts = Counter(r["structure"] for r in short if r["domain"] == domain)
        assert len(counts) >= 4 and max(counts.values()) <= 2 * min(counts.values()), counts
    # one sentence per prompt naming the task's topic and subject; most prompts byte-unique
    apples = [
        p
        for r in short
        if r["task_id"] == "m0"
        for p in analyze_script(extract_script(r["messages"][-1]["content"]))["system_prompts"]
    ]
    assert sum("about the apples" in p for p in apples) >= len(apples) // 2
    assert any("count_vowels" in r["messages"][-1]["content"] for r in short if r["task_id"] == "c0")
    prompts = Counter(
        p
        for r in short
        for p in analyze_script(extract_script(r["messages"][-1]["content"]))["system_prompts"]
    )
    assert sum(1 for c in prompts.values() if c == 1) / sum(prompts.values()) >= 0.5


def test_code_executor_examples_pair_the_designs_coder_prompts_with_the_reference_program():
    """--code-references: a coder's first call as the engine makes it, answered with the reference program."""
    from metaagent.distill.cold_start_data import reference_executor_examples
    from metaagent.workflow.protocol import AGENT_PROTOCOL, extract_delivery

    designer = designer_examples(TASKS, load_templates(), per_task=12, seed=0, style="compact", short=True)
    refs = {"c0": "s = input()\nprint(sum(ch in 'aeiou' for ch in s))"}  # c1 has none: no example for it
    rows = reference_executor_examples(designer, TASKS, refs, per_task=3, seed=0)
    assert len(rows) == 3 and {r["task_id"] for r in rows} == {"c0"}
    coder_prompts = {
        p for r in designer if r["task_id"] == "c0"
        for p in analyze_script(extract_script(r["messages"][-1]["content"]))["system_prompts"]
    }  # fmt: skip
    for row in rows:
        system, user, reply = (m["content"] for m in row["messages"])
        assert system.endswith(AGENT_PROTOCOL) and system[: -len(AGENT_PROTOCOL)].strip() in coder_prompts
        assert "program" in system[: -len(AGENT_PROTOCOL)] and user == TASKS[5].question
        assert extract_delivery(reply) == f"```python\n{refs['c0']}\n```"
        assert row["kind"] == "executor" and row["source"] == "reference-solution" and row["correct"] is True
    assert len({r["messages"][0]["content"] for r in rows}) == 3  # three different coder prompts
    assert rows == reference_executor_examples(designer, TASKS, refs, per_task=3, seed=0)  # seeded


def test_suite_coder_and_tool_reader_examples_for_math_tasks():
    """--suite: a math task's coder answers with the program that prints the answer (prompts pooled over its
    family when its own designs have no coder); a tool-pair reasoner handed the output delivers it boxed."""
    from metaagent.data import load_tasks
    from metaagent.data.suite import suite_references
    from metaagent.distill.cold_start_data import (
        CODER_MESSAGES,
        reference_executor_examples,
        tool_reader_examples,
    )
    from metaagent.distill.short_style import SUITE_SHORT_TEMPLATES
    from metaagent.workflow.protocol import AGENT_PROTOCOL, extract_delivery

    tasks = load_tasks("suite_arith:train")[:6] + load_tasks("suite_code:train")[:2]
    designer = designer_examples(
        tasks, load_templates(), per_task=4, seed=0, style="compact", short=True, extra_templates=SUITE_SHORT_TEMPLATES
    )
    refs = suite_references()
    plain = reference_executor_examples(designer, tasks, refs, per_task=2, seed=0)
    assert {r["domain"] for r in plain} == {"code"}  # math tasks only with math=True (v5's data unchanged)
    rows = reference_executor_examples(designer, tasks, refs, per_task=2, seed=0, math=True)
    math_rows = [r for r in rows if r["domain"] == "math"]
    assert {r["task_id"] for r in math_rows} == {t.id for t in tasks if t.domain == "math"}  # pooled prompts
    by_id = {t.id: t for t in tasks}
    for row in math_rows:
        system, user, reply = (m["content"] for m in row["messages"])
        role = system[: -len(AGENT_PROTOCOL)].strip()
        assert "program" in role and "\\boxed" not in role
        assert user in {m.format(task=by_id[row["task_id"]].question) for m in CODER_MESSAGES}
        assert extract_delivery(reply) == f"```python\n{refs[row['task_id']].strip()}\n```"
    readers = tool_reader_examples(designer, tasks, per_task=1, seed=0)
    assert {r["task_id"] for r in readers} == {t.id for t in tasks if t.domain == "math"}
    for row in readers:
        system, user, reply = (m["content"] for m in row["messages"])
        answer = by_id[row["task_id"]].answer
        assert "\\boxed" in system and f"{answer}\n" in user
        assert extract_delivery(reply) == f"\\boxed{{{answer}}}" and row["source"] == "tool-output"
    code_designs = [r for r in designer if r["domain"] == "code"]
    assert any(r["template"] == "short_samples_code" for r in code_designs)
    assert not any(r["template"] == "short_samples_code" for r in designer_examples(
        tasks, load_templates(), per_task=4, seed=0, style="compact", short=True))  # fmt: skip


def test_suite_families_names_an_unknown_family_before_any_work(tmp_path):
    """``--suite-families`` picks the families ``--suite`` draws from (the suite cold start was made from four)."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(root / "scripts" / "make_cold_start_data.py"), "--out", str(tmp_path / "d"),
         "--suite", "1", "--suite-families", "arith", "nope"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "--suite-families: unknown ['nope']; the suite has arith, code, lookup, start, strings" in done.stderr
    assert not (tmp_path / "d").exists()
