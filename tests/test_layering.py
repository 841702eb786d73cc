"""Imports only go downward: the declared order of the package's rooms, enforced over every import in
``metaagent/**`` (module level and inside functions alike).

A room may import any room of a lower layer and itself; never a room of its own layer or above. No two files
import each other, directly or through others (no import cycle between files).

An import inside a function has a reason (:func:`package_graph.function_imports`): it loads a heavy package,
runs at a process's start-up, is optional, or is a listed deferral; every other import sits at module level.
The layers, the reasons and the readers of the source are in ``tests/package_graph.py`` (shared with
``scripts/extension_audit.py``).
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from package_graph import (
    DEFERRED,
    ENTRY_POINTS,
    FUNCTIONS,
    HEAVY_PACKAGES,
    LAYER_OF,
    PACKAGE,
    Package,
    _cycles,
    _module,
    _room,
    file_cycles,
    function_imports,
    heavy_modules,
    import_graph,
    upward_imports,
)


def test_every_room_has_a_layer():
    rooms = {_room(_module(p)) for p in PACKAGE.rglob("*.py")}
    missing = rooms - set(LAYER_OF)
    assert not missing, f"declare the layer of {sorted(missing)} in LAYERS"


def test_every_package_has_a_docstring():
    """Each package says what it holds (docs/layout.md's rows are made of these docstrings)."""
    missing = [
        str(p.parent.relative_to(PACKAGE.parent))
        for p in sorted(PACKAGE.rglob("__init__.py"))
        if not (ast.get_docstring(ast.parse(p.read_text())) or "").strip()
    ]
    assert missing == [], f"packages without a docstring: {missing}"


def test_imports_only_go_downward():
    upward = upward_imports(import_graph())
    assert not upward, "imports that do not go downward:\n" + "\n".join(sorted(upward))


def test_programs_beside_train_import_only_the_kit():
    """``sft``, ``distill``, ``serve`` and ``replay`` are peers of ``train``: what they share with it is the
    training kit (``learn``), so none of them imports ``train`` (only ``cli`` sits above all of them)."""
    peers = {"sft", "distill", "serve", "replay"}
    found = sorted(
        f"{mod} -> {t}" for mod, ts in import_graph().items() for t in ts if _room(mod) in peers and _room(t) == "train"
    )
    assert not found, "import the training kit (metaagent.learn) instead of train:\n" + "\n".join(found)



def test_no_import_cycle_between_files():
    cycles = file_cycles()
    assert not cycles, "import cycles between files: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_check_catches_an_upward_import_inside_a_function(tmp_path):
    """An import inside a function body counts: a policy module that imports the CLI is reported."""
    graph = import_graph()
    graph["metaagent.policy.models"] = graph["metaagent.policy.models"] | {"metaagent.cli.display"}
    graph["metaagent.workflow.sandbox"] = graph["metaagent.workflow.sandbox"] | {"metaagent.rollout.engine"}
    found = upward_imports(graph)
    assert any(line.startswith("metaagent.policy.models -> metaagent.cli.display") for line in found)
    assert any(line.startswith("metaagent.workflow.sandbox -> metaagent.rollout.engine") for line in found)
    tree = ast.parse("def f():\n    from metaagent.cli import display\n")
    assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(tree))


def test_cycles_are_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# ---- imports inside functions: each one has a reason -----------------------------------------------------------


def test_every_import_inside_a_function_has_a_reason():
    """An import inside a function is for a heavy package (or a module that loads one), a process's start-up,
    an optional package, or a :data:`DEFERRED` reason; one that loads nothing heavy goes at module level, where
    a reader sees what the module depends on."""
    light = [f"{where}: {mod} imports {t}" for where, mod, t, kind in function_imports() if kind == "light"]
    assert not light, (
        "imports inside functions that load nothing heavy: import them at module level (or name the reason in "
        "DEFERRED, tests/test_layering.py):\n" + "\n".join(light)
    )


def test_the_import_kinds_are_told_apart(monkeypatch):
    package = Package()
    fake = "metaagent.policy.fake_module"
    package.paths[fake] = PACKAGE / "policy" / "fake_module.py"
    package.trees[fake] = ast.parse(
        "import os\n"
        "def work():\n"
        "    import json\n"
        "    import torch\n"
        "    from metaagent.train.loop import TrainLoop\n"
        "    from metaagent.errors import MetaAgentError\n"
        "    from metaagent.workflow import Limits\n"
        "    from metaagent.workflow import check_script\n"
        "    try:\n"
        "        import tomllib\n"
        "    except ImportError:\n"
        "        tomllib = None\n"
        "    from metaagent.records import Design\n"
        "def main():\n"
        "    import textwrap\n"
    )
    monkeypatch.setitem(ENTRY_POINTS, fake, frozenset({"main"}))
    monkeypatch.setitem(DEFERRED, (fake, "metaagent.records"), "a test's reason")
    rows = {t: kind for _where, mod, t, kind in function_imports(package) if mod == fake}
    assert rows == {
        "json": "light", "torch": "heavy", "metaagent.train.loop": "heavy", "metaagent.errors": "light",
        "metaagent.workflow.limits": "light",  # a lazily exported name: the module that defines it
        "metaagent.workflow.checker": "heavy",  # libcst
        "tomllib": "optional", "metaagent.records": "deferred", "textwrap": "start-up",
    }  # fmt: skip
    assert "metaagent.train.verl_backend.verl_plugin" in heavy_modules(package)  # HEAVY_MODULES: patches on import


def test_the_entry_points_and_deferred_imports_name_what_exists():
    """Every command of pyproject.toml is an entry point here; every entry point function and every DEFERRED
    import still exists (a stale reason would hide a new light import)."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    scripts = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]["scripts"]
    for command, target in scripts.items():
        module, function = target.split(":")
        assert function in ENTRY_POINTS.get(module, ()), f"{command}: add {target} to ENTRY_POINTS"
    package = Package()
    for module, functions in ENTRY_POINTS.items():
        defined = {n.name for n in package.trees[module].body if isinstance(n, (*FUNCTIONS, ast.ClassDef))}
        assert functions <= defined, f"ENTRY_POINTS[{module!r}]: no function {sorted(functions - defined)}"
    used = {(mod, t) for _where, mod, t, kind in function_imports(package) if kind == "deferred"}
    stale = sorted(set(DEFERRED) - used)
    assert not stale, f"DEFERRED entries no function imports any more: {stale}"
    assert all(reason.strip() for reason in DEFERRED.values())


def test_importing_the_package_and_the_train_command_loads_no_heavy_package():
    """``import metaagent`` and ``import metaagent.cli.train`` (what ``train-metaagent --help`` imports) load
    none of :data:`HEAVY_PACKAGES`, in a fresh interpreter."""
    code = (
        "import sys, metaagent, metaagent.cli.train\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY_PACKAGES)!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                          cwd=PACKAGE.parent)  # fmt: skip
    assert done.stdout.strip() == "[]", done.stdout
