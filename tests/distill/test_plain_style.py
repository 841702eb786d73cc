"""Plain-style scripts: no f-strings, built prompts on their own lines, and the SAME behaviour (every agent
receives the same messages and the same value is submitted), checked by running both versions on a fake API."""

from __future__ import annotations

import hashlib
import random

import pytest

from metaagent.data import load_bundled
from metaagent.domain import domain_tool_names
from metaagent.distill.plain_style import plain_style
from metaagent.distill.variation import instantiate
from metaagent.workflow import analyze_script, check_script, load_templates, rules

TEMPLATES = load_templates()
TOOLS = set(rules.DEFAULT_TOOL_NAMES).union(domain_tool_names())


class _Submitted(Exception):
    pass


def _run(script: str, replies: int) -> tuple[list, object]:
    """Runs ``script`` on a deterministic fake workflow API; returns the (role, message) log and the submission."""
    log: list = []
    counter = [0]

    def reply(role: str, message: str) -> str:
        counter[0] += 1
        words = ("CORRECT", "VALID", "INVALID", "FAIL", "Test Output: 3")
        h = hashlib.sha256(f"{role}|{message}|{counter[0]}".encode()).hexdigest()
        return f"{role} says {h[:6]} {words[(counter[0] + replies) % len(words)]} \\boxed{{{counter[0] % 3}}}"

    class Agent:
        def __init__(self, name, system_prompt, memory=True):
            self.name = name

        def __call__(self, message):
            assert isinstance(message, str)
            log.append((self.name, message))
            return reply(self.name, message)

    def parallel(agents, messages):
        if isinstance(agents, list) and isinstance(messages, str):
            return [a(messages) for a in agents]
        if isinstance(agents, list):
            return [a(m) for a, m in zip(agents, messages)]
        return [agents(m) for m in messages]

    def submit(value):
        raise _Submitted(value)

    def tool(name):
        def f(*args):
            log.append((name, args))
            return f"{name} output {len(log)} FAIL" if len(log) % 2 else f"{name} output {len(log)}"

        return f

    env = {
        "Agent": Agent, "parallel": parallel, "submit": submit, "task": "What is 2 + 3?\nBe brief {x}.",
        "boxed": lambda t: t.rsplit("boxed{", 1)[-1].split("}")[0] if "boxed{" in t else "",
        "majority": lambda xs: max(set(xs), key=xs.count) if xs else "",
        **{n: tool(n) for n in ("run_program", "run_tests", "env_observe", "env_step", "retrieve")},
    }  # fmt: skip
    try:
        exec(compile(script, "<script>", "exec"), env)  # noqa: S102 - our own template text
    except _Submitted as s:
        return log, s.args[0]
    return log, None


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.name)
def test_plain_style_behaves_like_the_template(template):
    plain = plain_style(template.source)
    assert check_script(plain, tool_names=TOOLS).ok
    a, b = analyze_script(template.source), analyze_script(plain)
    assert (a["structure"], a["pattern"], a["system_prompts"]) == (
        b["structure"],
        b["pattern"],
        b["system_prompts"],
    )
    for replies in range(3):
        assert _run(plain, replies) == _run(template.source, replies)


def test_plain_style_removes_f_strings_and_nested_prompt_building():
    changed = 0
    for template in TEMPLATES:
        plain = plain_style(template.source)
        changed += plain != template.source
        body = [line for line in plain.splitlines() if not line.startswith("#")]
        assert not any('f"' in line for line in body), (template.name, plain)
        # no agent call inside another call gets a built (concatenated) message
        assert not any("submit(" in line and "+" in line for line in body), (template.name, plain)
    assert changed >= len(TEMPLATES) // 2


def test_plain_style_keeps_format_specs_and_unparsable_input():
    kept = 'a = Agent("A", "x")\nsubmit(a(f"{task!r}"))\n'
    assert plain_style(kept) == kept
    assert plain_style("submit(") == "submit("
    assert plain_style('a = Agent("A", "x")\nsubmit(a(f"n={task}"))\n') == (
        'a = Agent("A", "x")\nprompt = "n=" + task\nsubmit(a(prompt))\n'
    )


def test_plain_style_variants_of_task_specific_designs_stay_valid():
    tasks = [t for t in load_bundled("train") if t.domain in ("math", "code")]
    rng = random.Random(0)
    for task in rng.sample(tasks, 6):
        for template in [t for t in TEMPLATES if task.domain in t.domains]:
            variant = instantiate(template, task, rng, vary=True, structural=True)
            plain = plain_style(variant.script)
            assert check_script(plain).ok, plain
            assert _run(plain, 1) == _run(variant.script, 1)
