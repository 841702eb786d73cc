"""``scripts/extension_audit.py`` prints the numbers of the extension points beside their goals, and exits 1
naming the goal that a change misses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from package_graph import Table

from metaagent.lazy import import_file

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "extension_audit.py"


@pytest.fixture
def audit():
    return import_file(SCRIPT, "extension_audit")


@pytest.mark.slow
def test_the_audit_meets_every_goal_on_this_checkout():
    done = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "style(s) {'Registry': " in out and "extension points without plugins (goal: none of 6): none" in out
    assert "light 0 (goal: light 0)" in out and "upward imports: 0 (goal: 0)" in out
    assert "a domain with its own data: 2 files (goal: 1 + its data)" in out
    assert "'domain': 'arith'" in out and "'tolerance': 1" in out
    assert out.rstrip().endswith("every goal met")


def test_a_second_registration_style_misses_the_goal(audit, monkeypatch, capsys):
    """A dict table filled by a register function (the style domains had) is reported and fails the run; the
    subprocess checks are stubbed here (the slow test runs them)."""
    real = audit.graph.extension_tables
    extra = Table("metaagent/x.py:1", "_WIDGETS", "dict", "register_widget", None)
    monkeypatch.setattr(audit.graph, "extension_tables", lambda package: [*real(package), extra])
    monkeypatch.setattr(audit, "load_alone", lambda files: {"domain": "arith", "votes": True, "tasks": 2,
                                                              "tolerance": 1})  # fmt: skip
    monkeypatch.setattr(audit, "python", lambda code, **kw: subprocess.CompletedProcess([], 0, "", ""))
    assert audit.main([]) == 1
    out = capsys.readouterr().out
    assert "2 style(s) {'Registry': " in out and "'dict': 1}" in out
    assert "metaagent/x.py:1" in out and out.rstrip().endswith("goals missed: registration")
