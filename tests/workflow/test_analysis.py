from __future__ import annotations

import json

import pytest

from metaagent.workflow import analyze_script
from metaagent.workflow.analysis import PATTERN_STRUCTURE, STRUCTURE_FAMILY

CASES = {
    "single": ('s = Agent("MathSolver", "p")\nsubmit(s(task))\n', "single"),
    "inline agent": ('submit(Agent("MathSolver", "p")(task))\n', "single"),
    "self-refine": ('s = Agent("MathSolver", "p")\nd = s(task)\nsubmit(s("Improve: " + d))\n', "reflection"),
    "critic without loop": (
        's = Agent("Solver", "p")\nc = Agent("Critic", "p")\nsubmit(c(s(task)))\n',
        "reflection",
    ),
    "verifier": (
        (
            's = Agent("Solver", "p")\nv = Agent("Checker", "p")\nx = s(task)\nfor i in range(2):\n'
            '    if "OK" in v(x):\n        break\n    x = s(task)\nsubmit(x)\n'
        ),
        "verifier",
    ),
    "loop over solvers then judge": (
        (
            'team = [Agent(f"Solver{i}", "p") for i in range(3)]\nj = Agent("Judge", "p")\n'
            "outs = [m(task) for m in team]\nsubmit(j(str(outs)))\n"
        ),
        "ensemble-judge",
    ),
    "sequential vote": (
        's = Agent("Solver", "p", memory=False)\nouts = [s(task) for _ in range(4)]\nsubmit(majority(outs))\n',
        "self-consistency",
    ),
    "ensemble without judge": (
        'a = Agent("A", "p")\nb = Agent("B", "p")\nsubmit(str(parallel([a, b], task)))\n',
        "ensemble",
    ),
    "debate by rounds": (
        (
            'ds = [Agent("A", "p"), Agent("B", "p")]\nx = parallel(ds, task)\nfor r in range(3):\n'
            "    x = parallel(ds, str(x))\nsubmit(x[0])\n"
        ),
        "debate",
    ),
    "tester role with a program run": (
        'c = Agent("Coder", "p")\nt = Agent("UnitTestAgent", "p")\np = c(task)\nsubmit(run_program(p, t(task)))\n',
        "solver-tester",
    ),
    "pipeline": ('a = Agent("Reader", "p")\nb = Agent("Writer", "p")\nsubmit(b(a(task)))\n', "pipeline"),
    "no agent call": ('a = Agent("A", "p")\nsubmit(task)\n', "other"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_patterns(name):
    source, pattern = CASES[name]
    result = analyze_script(source)
    assert result["pattern"] == pattern, result
    assert result["structure"] == PATTERN_STRUCTURE[pattern]
    assert result["family"] == STRUCTURE_FAMILY[result["structure"]]


def test_fields_are_json_and_describe_the_team():
    source = (
        'solvers = [Agent(f"Solver{i}", f"You are solver {i}.") for i in range(3)]\n'
        'judge = Agent("MathJudge", "You judge." " Briefly.")\n'
        "drafts = parallel(solvers, task)\nsubmit(judge(str(drafts)))\n"
    )
    r = analyze_script(source)
    assert json.loads(json.dumps(r)) == r
    assert r["roles"] == ["Solver{i}", "MathJudge"]
    assert r["system_prompts"] == ["You are solver {i}.", "You judge. Briefly."]
    assert (r["num_agents"], r["num_call_sites"]) == (4, 2)
    assert r["uses_parallel"] and not r["uses_tools"] and not r["loops"] and r["submits"]
    assert {"fan-out", "judge", "parallel"} <= set(r["tags"])


def test_broken_scripts_are_other_and_never_raise():
    for text in ("def (:", "x = " + "(" * 3000, 42, "", "a = Agent(1, 2)\na(task)\n"):
        r = analyze_script(text)  # type: ignore[arg-type]
        assert r["structure"] in STRUCTURE_FAMILY
    assert analyze_script("def (:")["parse_ok"] is False
    assert analyze_script("a = Agent(1, 2)\na(task)\n")["roles"] == ["?"]
