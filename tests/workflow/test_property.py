"""Property-based: random and mutated scripts never crash the checker, never hang the sandbox."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from builders import HANG_MARGIN_S
from hypothesis import strategies as st
from wf_helpers import fake_tools, role_reply

from metaagent.policy import ScriptedPolicy
from metaagent.records import EXECUTION_STATUSES, CheckReport
from metaagent.workflow import analyze_script, check_script, extract_script, load_templates

TEMPLATES = [t.source for t in load_templates()]
TOKENS = [
    "(", ")", "[", "]", "{", "}", ":", "\n", "    ", "=", ".", ",", "'", '"', "f'", "while True:", "for x in",
    "__class__", "_getattr_", "submit(", "Agent(", "parallel(", "task", "1/0", "**", "import os", "lambda:",
    "try:", "except:", "yield", "print(", "range(", "10**10**8", "\\", "#", "\x00", "\u00e9", "\ud800",
]  # fmt: skip


@st.composite
def mutated_template(draw) -> str:
    lines = draw(st.sampled_from(TEMPLATES)).splitlines()
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "duplicate", "insert", "swap"]))
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        if op == "delete" and lines:
            lines.pop(i)
        elif op == "duplicate" and lines:
            lines.insert(i, lines[i])
        elif op == "swap" and len(lines) > 1:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            line = lines[i] if lines else ""
            at = draw(st.integers(0, len(line)))
            lines[i : i + 1] = [line[:at] + draw(st.sampled_from(TOKENS)) + line[at:]]
    return "\n".join(lines) + "\n"


SCRIPTS = st.one_of(st.text(max_size=300), mutated_template())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCRIPTS)
def test_static_tools_never_raise(text):
    report = check_script(text)
    assert isinstance(report, CheckReport)
    assert report.ok == (not report.errors)
    assert all(d.line >= 1 and d.col >= 0 and d.code for d in report.errors)
    result = analyze_script(text)
    assert result["structure"] in ("single", "reflection", "ensemble", "solver-tester", "debate", "other")
    extract_script(text)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(source=mutated_template(), check=st.booleans())
def test_sandbox_never_hangs_past_its_limit(pool, source, check):
    start = time.monotonic()
    ex = pool.run(source, "What is 2 + 3?", ScriptedPolicy(role_reply), {"timeout_s": 0.5, "max_agent_calls": 12},
                  tools=fake_tools(), check=check)  # fmt: skip
    assert time.monotonic() - start < 0.5 + HANG_MARGIN_S  # the limit, plus a worker restart on a loaded machine
    assert ex.status in EXECUTION_STATUSES
    if ex.status == "ok":
        assert ex.error is None
    else:
        assert ex.error is not None and ex.error.type
