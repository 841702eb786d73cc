"""Print the numbers of the package's extension points and structure, each beside its goal.

    python scripts/extension_audit.py          # exits 1 when a goal is missed

- registration: every extension table of ``metaagent/`` and its style (goal: one style, the project's
  ``Registry``; the extension points of ``PLUGIN_KINDS`` take plugins from entry points);
- imports inside functions by kind (goal: no ``light`` one), imports that go upward (goal: 0), import
  cycles between files (goal: 0);
- the files a domain with its own data needs: the example ``tests/domains/arith_domain.py``, counted as the
  module plus the files its code names, the files of the package that name it (goal: 1 + its data, and none),
  and whether it loads, with its data source and setting, from a folder holding only those files;
- every ``metaagent`` import line README.md shows still imports.

The readers of the source are ``tests/package_graph.py``, which the layering and registry tests assert on.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from metaagent.lazy import import_file

ROOT = Path(__file__).resolve().parents[1]
graph = import_file(ROOT / "tests" / "package_graph.py", "package_graph")

#: run in a folder holding only the example domain's files: its record, source and setting are there
LOAD_EXAMPLE = """
import json
import metaagent.domain as domain
from metaagent.data import load_tasks
from metaagent.rewards import RewardConfig
record = domain.get_domain("arith")
tasks = load_tasks("arith:train")
settings = RewardConfig.from_dict({"domains": {"arith": {"tolerance": 1}}}).domain_settings("arith")
print(json.dumps({"domain": record.name, "votes": record.votes, "tasks": len(tasks),
                  "tolerance": settings.tolerance}))
"""


def python(code: str, *, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``code`` run by this interpreter in ``cwd`` (a fresh process: nothing of this one is loaded)."""
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def registration(package) -> tuple[list[str], bool]:
    """Every extension table and its style; the extension points that take no plugins."""
    tables = graph.extension_tables(package)
    styles = Counter(t.style for t in tables)
    lacking = [k for k in graph.PLUGIN_KINDS if not any(t.kind == k and t.group for t in tables)]
    lines = [f"registration: {len(tables)} extension tables, {len(styles)} style(s) {dict(styles)} "
             "(goal: 1, Registry)"]  # fmt: skip
    lines += [f"  {t.where:45} {t.name:22} {t.style:9} {t.kind:22} plugins: {t.group or '-'}" for t in tables]
    lines.append(f"  extension points without plugins (goal: none of {len(graph.PLUGIN_KINDS)}): "
                 f"{lacking or 'none'}")  # fmt: skip
    return lines, len(styles) == 1 and "Registry" in styles and not lacking


def imports(package) -> tuple[list[str], bool]:
    """Imports inside functions by kind, upward imports, import cycles between files."""
    kinds = Counter(kind for *_, kind in graph.function_imports(package))
    upward = graph.upward_imports(graph.import_graph())
    cycles = graph.file_cycles()
    by_kind = ", ".join(f"{k} {kinds.get(k, 0)}" for k in graph.KINDS)
    lines = [
        f"imports inside functions: {by_kind} (goal: light 0)",
        f"upward imports: {len(upward)} (goal: 0)", *(f"  {u}" for u in upward),
        f"import cycles between files: {len(cycles)} (goal: 0)",
        *(f"  {' <-> '.join(c)}" for c in cycles),
    ]  # fmt: skip
    return lines, kinds.get("light", 0) == 0 and not upward and not cycles


def load_alone(files: list[Path]) -> dict | str:
    """What the example domain gives when its files are all its folder on the import path holds (or why not)."""
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            shutil.copy(f, tmp)
        path = os.pathsep.join(p for p in (tmp, os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "METAAGENT_DOMAINS": graph.EXAMPLE_DOMAIN.stem, "PYTHONPATH": path}
        done = python(LOAD_EXAMPLE, cwd=Path(tmp), env=env)
    return json.loads(done.stdout) if done.returncode == 0 else last_line(done.stderr)


def example_domain(package) -> tuple[list[str], bool]:
    """The example domain's files, the package's files naming it, and whether it loads from its own alone."""
    files = graph.domain_files()
    naming = graph.files_naming("arith", package)
    loaded = load_alone(files)
    names = ", ".join(str(f.relative_to(ROOT)) for f in files)
    lines = [
        f"a domain with its own data: {len(files)} files (goal: 1 + its data): {names}",
        f"  files of the package, configs/ and templates/ naming it: {len(naming)} (goal: 0) {naming or ''}",
        f"  loads from a folder holding only those files: {loaded}",
    ]
    works = isinstance(loaded, dict) and loaded["tasks"] > 0 and loaded["tolerance"] == 1
    return [line.rstrip() for line in lines], len(files) == 2 and not naming and works


def readme() -> tuple[list[str], bool]:
    """Each import line of README.md's Python examples, in a fresh interpreter."""
    statements = graph.readme_imports((ROOT / "README.md").read_text(encoding="utf-8"))
    lines, failed = [], 0
    for statement in statements:
        done = python(statement, cwd=Path(tempfile.gettempdir()))
        failed += done.returncode != 0
        lines.append(f"  {'FAIL' if done.returncode else 'ok  '} {statement}"
                     + (f"  ({last_line(done.stderr)})" if done.returncode else ""))  # fmt: skip
    head = f"README.md's import lines: {len(statements) - failed} of {len(statements)} import (goal: all)"
    return [head, *lines], failed == 0 and bool(statements)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    package = graph.Package()
    missed = []
    for name, (lines, ok) in (
        ("registration", registration(package)), ("imports", imports(package)),
        ("example domain", example_domain(package)), ("README imports", readme()),
    ):  # fmt: skip
        print("\n".join(lines))
        if not ok:
            missed.append(name)
    print(f"goals missed: {', '.join(missed)}" if missed else "every goal met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
