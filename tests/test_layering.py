"""Imports only go downward: the declared order of the package's rooms, enforced over every import in
``metaagent/**`` (module level and inside functions alike).

A room may import any room of a lower layer and itself; never a room of its own layer or above. Between
files, at most one import cycle is tolerated, and only inside one folder.

An import inside a function has a reason (:func:`function_imports`): it loads a heavy package, runs at a
process's start-up, is optional, or is a listed deferral; every other import sits at module level.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "metaagent"

# Lowest first. "" is the ground floor: metaagent/*.py (records, config, errors, ...).
LAYERS: list[set[str]] = [
    {""},
    {"execution"},
    {"policy"},
    {"learn"},  # the training kit: samples, losses, optimizer, log-probs, checkpoints, metrics (train, sft, replay, eval)
    {"envs"},  # host-side planning environments: below data (plan tasks), workflow (env tools), rewards
    {"data"},
    {"workflow"},
    {"rewards"},
    {"domains"},  # the built-in task domains (metaagent/domain.py looks them up by name, as plugins)
    {"credit"},
    {"rollout"},
    {"eval"},
    {"train"},
    {"sft", "distill", "serve", "replay"},
    {"cli"},
]
LAYER_OF = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _room(module: str) -> str:
    parts = module.split(".")
    if len(parts) < 2 or (PACKAGE / f"{parts[1]}.py").exists():
        return ""
    return parts[1]


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks (annotations only, never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def import_graph(*, runtime_only: bool = False) -> dict[str, set[str]]:
    """module -> metaagent modules it imports (anywhere in the file; ``runtime_only`` leaves out imports
    under ``if TYPE_CHECKING:``)."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_nodes(tree) if runtime_only else set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = package.split(".")
                    pkg = pkg[: len(pkg) - (node.level - 1)]
                    base = ".".join(pkg + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                if t.split(".")[0] != "metaagent":
                    continue
                while t not in modules and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t != mod:
                    graph[mod].add(t)
    return graph


def test_every_room_has_a_layer():
    rooms = {_room(_module(p)) for p in PACKAGE.rglob("*.py")}
    missing = rooms - set(LAYER_OF)
    assert not missing, f"declare the layer of {sorted(missing)} in LAYERS"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    upward = []
    for mod, targets in graph.items():
        for t in targets:
            a, b = _room(mod), _room(t)
            if a != b and LAYER_OF[b] >= LAYER_OF[a]:
                upward.append(f"{mod} -> {t}  ({a or 'ground'} layer {LAYER_OF[a]} -> {b or 'ground'} layer {LAYER_OF[b]})")
    return sorted(upward)


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


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_file_cycles_at_most_one_and_inside_one_folder():
    graph = import_graph(runtime_only=True)
    # A package's __init__ re-exporting its own modules is not a dependency cycle of the code.
    pruned = {
        m: {t for t in ts if not (t.endswith("__init__") or m.startswith(t + "."))} for m, ts in graph.items()
    }
    cycles = _cycles(pruned)
    assert len(cycles) <= 1, f"import cycles between files: {cycles}"
    for comp in cycles:
        folders = {c.rsplit(".", 1)[0] for c in comp}
        assert len(folders) == 1, f"an import cycle crosses folders: {comp}"


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

#: third-party packages whose import costs about as much as numpy's or more (``python -X importtime``: 80 ms
#: for numpy on a loaded 2-core machine, 200 ms for libcst, seconds for torch), or whose names load such a
#: package (``from safetensors.torch import ...``, ``from huggingface_hub import ...``); pydantic, PyYAML,
#: psutil, cloudpickle, filelock, RestrictedPython, Pillow and pygments are tens of ms or less and count as light
HEAVY_PACKAGES = frozenset({
    "torch", "transformers", "tokenizers", "safetensors", "accelerate", "peft", "trl", "datasets",
    "huggingface_hub", "vllm", "verl", "ray", "tensordict", "llama_cpp", "gguf",
    "numpy", "scipy", "pandas", "sympy", "math_verify", "matplotlib", "libcst",
    "hydra", "omegaconf", "openai", "httpx", "fastapi", "starlette", "uvicorn", "prometheus_client",
    "mlflow", "wandb", "tensorboard", "rich",
})  # fmt: skip

#: metaagent modules that load a heavy package at import time where the module-level imports do not show it
#: (code that runs at import); :func:`heavy_modules` adds every module that imports one of these
HEAVY_MODULES = frozenset({
    "metaagent.train.verl_backend.verl_plugin",  # installs its patches of verl on import (loads trl, verl, torch)
})  # fmt: skip

#: the functions of a process's start-up (a command's ``main`` and what only it calls, a worker process's
#: ``main``): what they import is loaded once, when the process starts, and only by that process, so
#: ``import metaagent.cli.train`` (``--help``, the plan check) stays as cheap as the flags it declares
ENTRY_POINTS: dict[str, frozenset[str]] = {
    "metaagent.cli.train": frozenset({"main", "_main", "build_parser", "resolve_config", "check_models", "run", "_run"}),
    "metaagent.cli.distill": frozenset({"main", "_main", "build_parser", "rollout_settings", "_file_and_flags", "build_config"}),
    "metaagent.cli.sft": frozenset({"main", "_main", "build_parser"}),
    "metaagent.cli.serve": frozenset({"main", "_main", "build_parser", "config_from_args"}),
    "metaagent.cli.replay": frozenset({"main", "_main", "run", "_act"}),
    "metaagent.cli.eval": frozenset({"main", "_main", "build_parser", "config_from_args"}),
    "metaagent.cli.export": frozenset({"main", "_main", "adapter_folder"}),
    "metaagent.workflow.worker": frozenset({"main"}),  # the sandbox worker process
    "metaagent.rewards._reward_worker": frozenset({"main", "_load"}),  # the reward helper process
    "metaagent.rewards._math_worker": frozenset({"main"}),  # the math checker process
    "metaagent.execution._code_harness": frozenset({"main"}),  # one process per code test
}  # fmt: skip

#: (module, what it imports inside a function) -> why it is not imported at module level
DEFERRED: dict[tuple[str, str], str] = {
    ("metaagent.policy.models", "metaagent.policy.cold_start"):
        "a real cycle: cold_start builds on models' names at its module level; models loads a cold start on request",
    ("metaagent.credit.control", "metaagent.rewards.selection"):
        "the rewards package (code runner, sandbox tools) would double the cost of importing credit (~300 ms more)",
    ("metaagent.cli.flags", "json"):
        "import metaagent.cli.train (what --help needs) loads no json: only a command's run renders flag values",
    ("metaagent.config", "metaagent.resources"):
        "importlib.resources (and its zip, bz2, lzma readers) loads when a config is read, not with every command",
    ("metaagent.workflow.api", "metaagent.workflow.tools"):
        "api runs in the sandbox worker; the host's tools (code runner, envs, corpus) only render the reference",
    ("metaagent.execution._code_harness", "traceback"):
        "the harness (one process per code test) starts on built-in modules; traceback only when a program fails",
    ("metaagent.execution._code_harness", "_confine"):
        "a module of the harness's folder, importable (under -I -S) only once _import_confine put it on sys.path",
    ("metaagent.execution._code_harness", "_plain"):
        "a module of the harness's folder, importable (under -I -S) only once _import_confine put it on sys.path",
}  # fmt: skip

KINDS = ("heavy", "start-up", "optional", "deferred", "light")


def _lazy_exports(path: Path) -> dict[str, str]:
    """``name -> submodule`` of a package whose ``__init__`` exports its names through ``lazy_exports``."""
    tree = ast.parse(path.read_text(), str(path))
    assigned = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "lazy_exports" and len(node.args) >= 2:
            table = node.args[1]
            table = assigned.get(table.id, table) if isinstance(table, ast.Name) else table
            return ast.literal_eval(table)
    return {}


class Package:
    """The modules of ``metaagent/`` with their parsed files and lazily exported names."""

    def __init__(self, root: Path = PACKAGE) -> None:
        self.paths = {_module(p): p for p in sorted(root.rglob("*.py"))}
        self.trees = {m: ast.parse(p.read_text(), str(p)) for m, p in self.paths.items()}
        self.lazy = {m: t for m, p in self.paths.items() if p.name == "__init__.py" and (t := _lazy_exports(p))}

    def targets(self, mod: str, node: ast.Import | ast.ImportFrom) -> list[str]:
        """What ``node`` in ``mod`` loads: metaagent modules (a lazily exported name: the submodule defining
        it) and other modules by their dotted names."""
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                pkg = mod.split(".") if self.paths[mod].name == "__init__.py" else mod.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([node.module] if node.module else []))
            names = []
            for a in node.names:
                sub = self.lazy.get(base, {}).get(a.name)
                names.append(f"{base}.{a.name}" if f"{base}.{a.name}" in self.paths else f"{base}.{sub}" if sub else base)
        out = []
        for t in names:
            if t.split(".")[0] == "metaagent":
                while t not in self.paths and "." in t:
                    t = t.rsplit(".", 1)[0]
            out.append(t)
        return out


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _chain(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[ast.AST]:
    """``node``'s ancestors, innermost first."""
    out = []
    while node in parents:
        node = parents[node]
        out.append(node)
    return out


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def heavy_modules(package: Package) -> set[str]:
    """The metaagent modules whose import loads a :data:`HEAVY_PACKAGES` package: it or a package above it
    imports one at module level (``if TYPE_CHECKING:`` aside), or a module of :data:`HEAVY_MODULES` or
    one that does."""
    direct: dict[str, set[str]] = {}
    for mod, tree in package.trees.items():
        parents, skip = _parents(tree), _type_checking_nodes(tree)
        parts = mod.split(".")
        deps = {".".join(parts[:i]) for i in range(1, len(parts))}  # its packages' __init__ run first
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in skip:
                continue
            if any(isinstance(a, FUNCTIONS) for a in _chain(node, parents)):
                continue
            for t in package.targets(mod, node):
                parts = t.split(".")
                deps |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} if parts[0] == "metaagent" else {t}
        direct[mod] = deps - {mod}
    heavy = set(HEAVY_MODULES) | {m for m, deps in direct.items() if any(d.split(".")[0] in HEAVY_PACKAGES for d in deps)}
    grown = True
    while grown:
        more = {m for m, deps in direct.items() if m not in heavy and deps & heavy}
        grown = bool(more)
        heavy |= more
    return heavy


def _catches_import_error(node: ast.Try) -> bool:
    names = {n.id for h in node.handlers if h.type is not None for n in ast.walk(h.type) if isinstance(n, ast.Name)}
    return bool(names & {"ImportError", "ModuleNotFoundError"})


def function_imports(package: Package | None = None) -> list[tuple[str, str, str, str]]:
    """``(file:line, module, imported, kind)`` of every import inside a function of ``metaagent/`` (one row a
    module imported), its kind the first of :data:`KINDS` that holds: ``heavy`` (the statement loads a
    :data:`HEAVY_PACKAGES` package or a module of :func:`heavy_modules`), ``start-up`` (inside a function of :data:`ENTRY_POINTS`),
    ``optional`` (inside ``try: ... except ImportError``), ``deferred`` (:data:`DEFERRED`), else ``light``."""
    package = package or Package()
    heavy = heavy_modules(package)
    rows = []
    for mod, tree in package.trees.items():
        parents = _parents(tree)
        where = package.paths[mod].relative_to(PACKAGE.parent)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            chain = _chain(node, parents)
            functions = [a for a in chain if isinstance(a, FUNCTIONS)]
            if not functions:
                continue
            top = next(a for a in reversed(chain) if isinstance(a, (*FUNCTIONS, ast.ClassDef)))
            inner = chain[: chain.index(functions[0])]
            targets = package.targets(mod, node)
            loads_heavy = any(t.split(".")[0] in HEAVY_PACKAGES or t in heavy for t in targets)
            for t in targets:
                if loads_heavy:
                    kind = "heavy"
                elif getattr(top, "name", None) in ENTRY_POINTS.get(mod, ()):
                    kind = "start-up"
                elif any(isinstance(a, ast.Try) and _catches_import_error(a) for a in inner):
                    kind = "optional"
                elif (mod, t) in DEFERRED:
                    kind = "deferred"
                else:
                    kind = "light"
                rows.append((f"{where}:{node.lineno}", mod, t, kind))
    return sorted(set(rows))


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
