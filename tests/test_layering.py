"""Imports only go downward: the declared order of the package's rooms, enforced over every import in
``metaagent/**`` (module level and inside functions alike).

A room may import any room of a lower layer and itself; never a room of its own layer or above. Between
files, at most one import cycle is tolerated, and only inside one folder.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

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
