from __future__ import annotations

import pytest
from wf_helpers import fake_tools

from metaagent.policy import ScriptedPolicy
from metaagent.workflow import analyze_script, check_script, load_templates
from metaagent.workflow.analysis import PATTERN_STRUCTURE, STRUCTURES
from metaagent.workflow.templates import TemplateError, parse_template

TEMPLATES = load_templates()
BY_NAME = {t.name: t for t in TEMPLATES}
REQUIRED_PATTERNS = {
    "single", "self-consistency", "ensemble-judge", "reflection", "verifier", "solver-tester", "debate",
    "plan-solve", "decompose", "tool-pair",
}  # fmt: skip


def test_the_loader_and_the_analysis_agree_on_structures():
    from metaagent.workflow import templates

    assert templates.STRUCTURES == STRUCTURES


def test_the_bank_covers_the_required_structures():
    assert len(TEMPLATES) >= 10
    assert REQUIRED_PATTERNS <= {t.pattern for t in TEMPLATES}
    assert {"math", "code"} <= {d for t in TEMPLATES for d in t.domains}
    for t in TEMPLATES:
        assert t.structure in STRUCTURES and PATTERN_STRUCTURE[t.pattern] == t.structure
        assert t.description and not t.source.lstrip().startswith("#")


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_template_passes_the_checker_without_warnings(name):
    from metaagent.workflow.rules import DEFAULT_TOOL_NAMES
    from metaagent.domain import get_domain

    extra = tuple(t for d in BY_NAME[name].domains for t in get_domain(d).tool_names)  # plan: the env tools
    report = check_script(BY_NAME[name].source, tool_names=DEFAULT_TOOL_NAMES + extra)
    assert report.ok and not report.warnings, report


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_template_is_classified_as_its_metadata_says(name):
    t = BY_NAME[name]
    a = analyze_script(t.source)
    assert (a["structure"], a["pattern"]) == (t.structure, t.pattern)
    assert (
        a["parse_ok"]
        and a["submits"]
        and a["num_agents"] >= 1
        and len(a["roles"]) == len(a["system_prompts"])
    )


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_role_prompts_ask_for_the_domain_answer_format(name):
    t = BY_NAME[name]
    prompts = " ".join(analyze_script(t.source)["system_prompts"])
    if t.domains == ("math",):  # an agent is asked for \boxed{}, or the script boxes what it submits (pot)
        assert "\\boxed{}" in prompts or '\\boxed{{' in t.source
    if t.domains == ("code",):
        assert "```python" in prompts


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_template_runs_to_ok_with_a_scripted_policy(pool, scripted, name):
    if "plan" in BY_NAME[name].domains:
        pytest.skip("plan templates need a plan task's environment tools: tests/rollout/test_plan_workflows.py")
    log = []
    ex = pool.run(BY_NAME[name].source, "What is 2 + 3?", scripted, tools=fake_tools(log), seed=0)
    assert ex.status == "ok", ex.error
    assert ex.submitted and ex.answer and ex.turns
    assert all(t.delivery is not None for t in ex.turns)
    if "tests" in analyze_script(BY_NAME[name].source)["tags"]:
        assert log and ex.tool_calls


def test_env_var_and_path_select_the_bank(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text(
        "# name: mine\n# structure: single\n# pattern: single\n# domains: math\n# description: d\n"
        'a = Agent("A", "p")\nsubmit(a(task))\n'
    )
    monkeypatch.setenv("METAAGENT_TEMPLATES", str(tmp_path))
    (only,) = load_templates()
    assert (only.name, only.domains, only.source) == (
        "mine",
        ("math",),
        'a = Agent("A", "p")\nsubmit(a(task))\n',
    )
    monkeypatch.delenv("METAAGENT_TEMPLATES")
    assert [t.name for t in load_templates(tmp_path)] == ["mine"]
    with pytest.raises(TemplateError, match="does not exist"):
        load_templates(tmp_path / "nope")


@pytest.mark.parametrize(
    "text, message",
    [
        ("x = 1\n", "missing"),
        (
            "# name: a\n# structure: star\n# pattern: p\n# domains: math\n# description: d\nx = 1\n",
            "structure",
        ),
        (
            "# name: a\n# structure: single\n# pattern: p\n# domains: poetry\n# description: d\nx = 1\n",
            "domains",
        ),
        ("# name: a\n# structure: single\n# pattern: p\n# domains: math\n# description: d\n", "no script"),
    ],
)
def test_malformed_templates_are_refused_by_name(text, message):
    with pytest.raises(TemplateError, match=message):
        parse_template(text, "bad.py")


def test_frozen_templates_are_deterministic_designs(pool):
    """A frozen design run twice with the same seed and policy gives the same execution."""
    policy = ScriptedPolicy(lambda r: f"<delivery>\\boxed{{{r.sampling.seed % 3}}}</delivery>")
    src = BY_NAME["self_consistency"].source
    a, b = (pool.run(src, "q", policy, seed=5) for _ in range(2))
    assert a.answer == b.answer and [t.delivery for t in a.turns] == [t.delivery for t in b.turns]
