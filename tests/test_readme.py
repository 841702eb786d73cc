"""README: at most 150 lines, says what it is, why and what is verified where on its first screen, documents
the two set-up commands, every relative link (pages, committed tables, the screenshot) lands on a file, and
every public import path it shows imports."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from package_graph import readme_imports

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 150
FIRST_SCREEN = 12  # lines


def test_the_readme_is_short_and_its_first_screen_says_what_why_and_status():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES}: move detail out)"
    first = "\n".join(lines[:FIRST_SCREEN])
    for label in ("**What it is:**", "**Why use it:**", "**Status:**"):
        assert label in first, f"{label} is not on README's first screen"
    assert "GPU" in first and "not established" in first


def test_the_readme_documents_the_two_set_up_commands():
    text = README.read_text(encoding="utf-8")
    assert re.search(r"^make demo\b", text, re.M) and re.search(r"^make test\b", text, re.M)


def test_every_relative_link_of_the_readme_lands_on_a_file():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets
    missing = [t for t in targets if "://" not in t and not (ROOT / t).is_file()]
    assert missing == []


def test_the_public_import_paths_the_readme_shows_still_import(tmp_path):
    """Each ``from metaagent... import ...`` line of README's examples, in a fresh interpreter."""
    statements = readme_imports(README.read_text(encoding="utf-8"))
    assert statements and all(s.startswith("from metaagent") for s in statements)
    done = subprocess.run([sys.executable, "-c", "\n".join(statements)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_import_lines_are_read_from_python_blocks_only():
    text = "```python\nfrom metaagent.policy import ScriptedPolicy  # a policy\nx = 1\n```\n"
    text += "```bash\nimport metaagent\n```\n"
    assert readme_imports(text) == ["from metaagent.policy import ScriptedPolicy"]
