"""The package read from its source (``ast``, nothing imported): its import graph, the declared order of its
rooms, the imports inside functions with their reasons, its extension tables and README's import lines.

One place for these facts: ``tests/test_layering.py`` and ``tests/test_registry.py`` assert them, and
``scripts/extension_audit.py`` prints them (it loads this file with ``metaagent.lazy.import_file``).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
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



def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    upward = []
    for mod, targets in graph.items():
        for t in targets:
            a, b = _room(mod), _room(t)
            if a != b and LAYER_OF[b] >= LAYER_OF[a]:
                upward.append(f"{mod} -> {t}  ({a or 'ground'} layer {LAYER_OF[a]} -> {b or 'ground'} layer {LAYER_OF[b]})")
    return sorted(upward)



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




def file_cycles() -> list[list[str]]:
    """The import cycles between files of the package at run time (``if TYPE_CHECKING:`` aside); a package's
    ``__init__`` re-exporting its own modules is not a dependency cycle of the code."""
    graph = import_graph(runtime_only=True)
    pruned = {
        m: {t for t in ts if not (t.endswith("__init__") or m.startswith(t + "."))} for m, ts in graph.items()
    }
    return _cycles(pruned)


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



# ---- extension tables: one registration style ---------------------------------------------------------

#: the extension points a user adds to by name, by the kind their table names them with: each takes plugins
#: (an installed distribution's entry points)
PLUGIN_KINDS = (
    "credit estimator", "policy loss", "template bank", "domain", "planning environment", "training backend",
)  # fmt: skip
#: how a registration function writes into a module-level table: ``TABLE[name] = ...``, ``TABLE.add(...)``
_WRITES = ("setdefault", "update", "append", "add", "extend", "__setitem__")
_MAKERS = ("dict", "defaultdict", "OrderedDict", "list", "set")
_LITERALS = (ast.Dict, ast.DictComp, ast.List, ast.ListComp, ast.Set, ast.SetComp)


@dataclass(frozen=True)
class Table:
    """An extension table of the package: ``style`` ``Registry`` (a :class:`metaagent.registry.Registry`) or
    ``dict`` (a module-level dict, list or set that a ``register*`` function writes); ``kind`` the Registry's
    name for its entries (a dict's: its register function); ``group`` its entry-point group (None: none)."""

    where: str
    name: str
    style: str
    kind: str
    group: str | None


def _module_assigns(tree: ast.Module) -> dict[str, tuple[ast.stmt, ast.expr]]:
    out: dict[str, tuple[ast.stmt, ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = (node, node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = (node, node.value)
    return out


def _called(value: ast.expr) -> str | None:
    """The last name of what ``value`` calls (``Registry``, ``dict``), or None when it is no call."""
    return ast.unparse(value.func).split(".")[-1] if isinstance(value, ast.Call) else None


def _string_constants(package: Package) -> dict[str, str]:
    """Module-level ``NAME = "text"`` of the whole package (a Registry's group may be another module's)."""
    out: dict[str, str] = {}
    for tree in package.trees.values():
        for name, (_node, value) in _module_assigns(tree).items():
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.setdefault(name, value.value)
    return out


def _registry_table(where: str, name: str, call: ast.Call, constants: dict[str, str]) -> Table:
    first = call.args[0] if call.args else None
    kind = first.value if isinstance(first, ast.Constant) else ast.unparse(first) if first else "?"
    group = next((k.value for k in call.keywords if k.arg == "group"), None)
    if isinstance(group, ast.Constant):
        group = group.value
    elif isinstance(group, ast.Name):
        group = constants.get(group.id, group.id)
    return Table(where, name, "Registry", str(kind), group)


def _containers(tree: ast.Module) -> dict[str, ast.stmt]:
    """Module-level dicts, lists and sets (literals, comprehensions, ``dict()``, ``defaultdict()``, ...)."""
    return {
        name: node
        for name, (node, value) in _module_assigns(tree).items()
        if isinstance(value, _LITERALS) or _called(value) in _MAKERS
    }


def _written_container(node: ast.AST) -> str | None:
    """The name ``node`` writes into (``NAME[key] = ...``, ``NAME.add(...)``: :data:`_WRITES`), or None."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
        return node.value.id if isinstance(node.value, ast.Name) else None
    func = node.func if isinstance(node, ast.Call) else None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.attr in _WRITES:
        return func.value.id
    return None


def _written_by_register_functions(tree: ast.Module, names: set[str]) -> dict[str, str]:
    """``name -> register function`` of the containers ``names`` that a ``register*`` function writes."""
    out: dict[str, str] = {}
    for fn in ast.walk(tree):
        function = isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        if function and fn.name.lstrip("_").startswith("register"):
            for node in ast.walk(fn):
                target = _written_container(node)
                if target in names:
                    out.setdefault(target, fn.name)
    return out


def extension_tables(package: Package | None = None) -> list[Table]:
    """Every extension table of ``metaagent/``: each module-level ``Registry(...)``, and each module-level
    dict, list or set a ``register*`` function writes (another registration style)."""
    package = package or Package()
    constants = _string_constants(package)
    tables = []
    for mod, tree in package.trees.items():
        path = package.paths[mod].relative_to(PACKAGE.parent)
        for name, (node, value) in _module_assigns(tree).items():
            if _called(value) == "Registry":
                tables.append(_registry_table(f"{path}:{node.lineno}", name, value, constants))
        containers = _containers(tree)
        for name, fn in _written_by_register_functions(tree, set(containers)).items():
            tables.append(Table(f"{path}:{containers[name].lineno}", name, "dict", fn, None))
    return sorted(tables, key=lambda t: t.where)


# ---- README's import lines ---------------------------------------------------------------------------------


def readme_imports(text: str) -> list[str]:
    """The ``import metaagent...`` / ``from metaagent... import ...`` statements of the ```` ```python ````
    blocks of ``text`` (a README), comments dropped."""
    out = []
    for block in re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        for line in block.splitlines():
            code = line.split("#", 1)[0].strip()
            if re.match(r"(from metaagent(\.\w+)* import |import metaagent\b)", code):
                out.append(ast.unparse(ast.parse(code)))
    return out


# ---- a domain in one file ----------------------------------------------------------------------------------

#: the example plugin domain: one module and its data (docs/guide/own-tasks.md, "A domain of your own")
EXAMPLE_DOMAIN = PACKAGE.parent / "tests" / "domains" / "arith_domain.py"


def _docstring_ids(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def domain_files(module: Path = EXAMPLE_DOMAIN) -> list[Path]:
    """The files a plugin domain consists of: its module and the files beside it that its code names (a
    string constant that is the name of a sibling file, such as its task file)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    docs = _docstring_ids(tree)
    named = {
        n.value for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    }  # fmt: skip
    data = sorted(p for p in module.parent.iterdir() if p.is_file() and p != module and p.name in named)
    return [module, *data]


def _code_naming(name: str, package: Package) -> list[str]:
    """``file:line`` of ``metaagent/`` where a string constant (no docstring) or an identifier is ``name``."""
    found = []
    for mod, tree in package.trees.items():
        docs = _docstring_ids(tree)
        for node in ast.walk(tree):
            constant = isinstance(node, ast.Constant) and id(node) not in docs
            if (node.value if constant else getattr(node, "id", None)) == name:
                found.append(f"{package.paths[mod].relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def files_naming(name: str, package: Package | None = None) -> list[str]:
    """Where the package, ``configs/`` and ``templates/`` name ``name`` (a domain's): a string constant or
    identifier in ``metaagent/`` (docstrings and comments aside), a word of a config outside its comments, a
    template's ``# domains:`` header. A plugin domain needs none of them."""
    found = _code_naming(name, package or Package())
    word = re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])")
    root = PACKAGE.parent
    for path in sorted((root / "configs").glob("*.yaml")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if word.search(line.split("#", 1)[0]):
                found.append(f"{path.relative_to(root)}:{n}")
    for path in sorted((root / "templates").rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("# domains:") and word.search(line):
                found.append(f"{path.relative_to(root)}:{n}")
    return sorted(set(found))
