"""Static checker for workflow scripts: refuse by default, explain every refusal.

``check_script(source)`` parses the script with libcst and walks it once. Statement and expression kinds,
names, attributes and builtins must be on the allow-lists of :mod:`metaagent.workflow.rules`; anything
else becomes a :class:`~metaagent.records.Diagnostic` with a stable code and a message a designer
model can act on (what was refused, what to use instead). The checker never raises: syntax errors, budget
overruns and even a bug in the checker itself come back as diagnostics.

Order of the passes (cheap and robust first):

1. type, emptiness and size budget;
2. CPython's own parser (``ast.parse``), which turns pathological inputs (thousands of nested brackets)
   into a SyntaxError, then a nesting-depth budget: libcst's native parser can crash the process on such
   inputs, so it only ever sees shallow scripts;
3. libcst: allowed syntax, names, attributes, forbidden builtins, rebinding of reserved names, and that
   the script creates and calls at least one agent.

Diagnostics have 1-based lines and 0-based columns. The checker is a usability and analysis layer;
safety does not depend on it: the sandbox compiles with RestrictedPython and guards attribute access
with the same allow-lists (see :mod:`metaagent.workflow.sandbox`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import lru_cache

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from metaagent.records import CheckReport, Diagnostic

from . import rules

#: at most this many errors are reported (the first ones are what the designer needs)
MAX_ERRORS = 20


def check_script(source: str, *, tool_names: Iterable[str] = rules.DEFAULT_TOOL_NAMES) -> CheckReport:
    """Check a workflow script; ``report.ok`` iff nothing was refused. Never raises.

    Args:
        source: the script (see :func:`metaagent.workflow.extract_script` to get it from designer text).
        tool_names: names of the host tools the script may call (default: those of ``default_tools``).
    """
    try:
        tools = tuple(sorted(set(tool_names)))
        report = _check_cached(source, tools) if isinstance(source, str) else _check(source, tools)
        return CheckReport.from_dict(report.to_dict())  # a private copy: callers may mutate it
    except Exception as e:  # noqa: BLE001 - never raise: a checker bug is a refusal that says so
        return CheckReport(
            ok=False, errors=[Diagnostic(1, 0, "E-CHECKER", f"the checker failed ({type(e).__name__}: {e})")]
        )


@lru_cache(maxsize=1024)
def _check_cached(source: str, tools: tuple[str, ...]) -> CheckReport:
    return _check(source, tools)


def _report(errors: list[Diagnostic], warnings: list[Diagnostic] | None = None) -> CheckReport:
    """Sorted, de-duplicated diagnostics; at most MAX_ERRORS errors."""
    errors = sorted(_unique(errors), key=lambda d: (d.line, d.col))[:MAX_ERRORS]
    return CheckReport(
        ok=not errors, errors=errors, warnings=sorted(_unique(warnings or []), key=lambda d: (d.line, d.col))
    )


def _unique(diags: Iterable[Diagnostic]) -> list[Diagnostic]:
    seen, out = set(), []
    for d in diags:
        key = (d.line, d.col, d.code, d.message)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def _check(source: object, tools: tuple[str, ...]) -> CheckReport:
    if not isinstance(source, str):
        return _report([Diagnostic(1, 0, "E-TYPE", f"the script must be text, got {type(source).__name__}")])
    if not source.strip():
        return _report([Diagnostic(1, 0, "E-EMPTY", "the script is empty: write a Python workflow script")])
    n_lines = source.count("\n") + 1
    if len(source) > rules.MAX_SCRIPT_CHARS or n_lines > rules.MAX_SCRIPT_LINES:
        return _report(
            [
                Diagnostic(
                    1,
                    0,
                    "E-SIZE",
                    f"the script has {len(source)} characters and {n_lines} lines; the budget is "
                    f"{rules.MAX_SCRIPT_CHARS} characters and {rules.MAX_SCRIPT_LINES} lines: write a shorter script",
                )
            ]
        )
    pre = _precheck(source)
    if pre is not None:
        return _report([pre])
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as e:
        return _report([Diagnostic(e.raw_line, e.raw_column, "E-SYNTAX", f"invalid syntax: {e.message}")])
    visitor = _Visitor(tools)
    module.visit(visitor)
    return visitor.report(module)


def _precheck(source: str) -> Diagnostic | None:
    """CPython's parser and the nesting budget, before libcst sees the text."""
    try:
        tree = ast.parse(source, "<script>")
    except SyntaxError as e:
        msg = e.msg or "invalid syntax"
        return Diagnostic(e.lineno or 1, max((e.offset or 1) - 1, 0), "E-SYNTAX", f"invalid syntax: {msg}")
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:  # null bytes, too deep, too big
        return Diagnostic(1, 0, "E-SYNTAX", f"the script cannot be parsed ({type(e).__name__}: {e})")
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > rules.MAX_NESTING:
            line = getattr(node, "lineno", 1)
            return Diagnostic(
                line, getattr(node, "col_offset", 0), "E-NESTING",
                f"the script nests {rules.MAX_NESTING}+ levels deep here; flatten the expression or use helper variables",
            )  # fmt: skip
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return None


def _kind(node: cst.CSTNode) -> str:
    return type(node).__name__


class _Visitor(cst.CSTVisitor):
    """One walk collecting refusals (by node, positioned afterwards), bindings, loads and calls."""

    def __init__(self, tools: tuple[str, ...]) -> None:
        super().__init__()
        self.tools = tools
        self.reserved = rules.reserved_names(tools)
        self.pending: list[tuple[cst.CSTNode, str, str, bool]] = []  # node, code, message, is_error
        self.not_variables: set[int] = set()  # ids of Name nodes that are attribute or keyword names
        self.stores: set[int] = set()
        self.bound: set[str] = set()
        self.functions: set[str] = set()
        self.stored_names: list[tuple[cst.Name, str]] = []
        self.loaded_names: list[tuple[cst.Name, str]] = []
        self.callee_names: list[str] = []
        self.subscript_calls = 0

    # ---- refusals ------------------------------------------------------------------------------------
    def error(self, node: cst.CSTNode, code: str, message: str) -> None:
        self.pending.append((node, code, message, True))

    def warn(self, node: cst.CSTNode, code: str, message: str) -> None:
        self.pending.append((node, code, message, False))

    def on_visit(self, node: cst.CSTNode) -> bool:
        kind = _kind(node)
        if isinstance(node, (cst.Import, cst.ImportFrom)):
            what = cst.Module([]).code_for_node(node).strip()
            self.error(
                node, "E-IMPORT",
                f"`{what}` is not allowed: workflow scripts import nothing; use the workflow API "
                f"({', '.join(rules.API_NAMES)}) and the builtins",
            )  # fmt: skip
            return False
        statement = isinstance(node, (cst.BaseSmallStatement, cst.BaseCompoundStatement))
        if (statement and kind not in rules.ALLOWED_STATEMENTS) or (
            isinstance(node, cst.BaseExpression) and kind not in rules.ALLOWED_EXPRESSIONS
        ):
            self.error(
                node,
                "E-UNSUPPORTED",
                rules.SYNTAX_HINTS.get(kind, f"{kind} is not supported in workflow scripts"),
            )
            return False
        if isinstance(node, (cst.Decorator, cst.Asynchronous)):
            self.error(node, "E-UNSUPPORTED", rules.SYNTAX_HINTS[kind])
            return False
        return super().on_visit(node)

    # ---- names ---------------------------------------------------------------------------------------
    def _bind(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            self.stores.add(id(target))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self._bind(el.value)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._bind(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._bind(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.target, cst.Name):  # both read and rebound
            self.stored_names.append((node.target, node.target.value))

    def visit_Param(self, node: cst.Param) -> None:
        self.stores.add(id(node.name))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.stores.add(id(node.name))
        self.functions.add(node.name.value)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.type is None:
            self.warn(
                node, "W-BARE-EXCEPT",
                "a bare `except:` also catches the end of the workflow (submit) and limit stops; write `except Exception:`",
            )  # fmt: skip
        if node.name is not None and isinstance(node.name.name, cst.Name):
            self.stores.add(id(node.name.name))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.not_variables.add(id(node.keyword))

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) in self.not_variables:
            return
        name = node.value
        if _refuse_underscore(self, node, name, "name"):
            return
        if id(node) in self.stores:
            self.bound.add(name)
            self.stored_names.append((node, name))
        else:
            self.loaded_names.append((node, name))

    # ---- attributes and calls --------------------------------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.not_variables.add(id(node.attr))
        attr = node.attr.value
        if _refuse_underscore(self, node.attr, attr, "attribute"):
            return
        if attr in rules.ALLOWED_ATTRIBUTES:
            return
        if attr in rules.INTROSPECTION_ATTRIBUTES:
            why = "it reaches interpreter internals (frames, code, tracebacks)"
        else:
            why = rules.ATTRIBUTE_HINTS.get(attr, "it is not on the allow-list")
        self.error(
            node.attr, "E-ATTR",
            f"attribute `.{attr}` is not available: {why}. Allowed are the usual string, list, dict and set "
            "methods (strip, split, join, replace, lower, startswith, append, get, items, ...) and agent.name",
        )  # fmt: skip

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name):
            self.callee_names.append(node.func.value)
        elif isinstance(node.func, cst.Subscript):
            self.subscript_calls += 1

    # ---- the verdict -----------------------------------------------------------------------------------
    def report(self, module: cst.Module) -> CheckReport:
        known = self.reserved | self.bound
        for node, name in self.loaded_names:
            if name in known:
                continue
            if name in rules.FORBIDDEN_NAMES:
                self.error(
                    node, "E-FORBIDDEN",
                    f"`{name}` is not available in workflow scripts ({rules.FORBIDDEN_NAMES[name]})",
                )  # fmt: skip
            else:
                self.error(
                    node, "E-NAME",
                    f"name `{name}` is never defined; assign it first, or use one of: {', '.join(rules.API_NAMES)}, "
                    f"{rules.TASK_NAME}{''.join(', ' + t for t in self.tools)} and the builtins",
                )  # fmt: skip
        for node, name in self.stored_names:
            if name in self.reserved:
                self.error(
                    node, "E-SHADOW",
                    f"`{name}` is part of the workflow API, the builtins or the tools and cannot be reassigned; "
                    "choose another name" + (" (e.g. `subtask`)" if name == rules.TASK_NAME else ""),
                )  # fmt: skip
        variables = self.bound - self.functions
        agent_calls = self.subscript_calls + sum(
            1 for c in self.callee_names if c == "parallel" or c in variables
        )
        if "Agent" not in self.callee_names or agent_calls == 0:
            self.pending.append(
                (
                    module, "E-NO-AGENT",
                    (
                        "the script never calls an agent: create one with Agent(name, system_prompt) and call it, "
                        "e.g. `solver = Agent(\"Solver\", \"You solve ...\")` then `answer = solver(task)`"
                    ),
                    True,
                )
            )  # fmt: skip
        if "submit" not in self.callee_names:
            self.warn(
                module, "W-NO-SUBMIT",
                "the script never calls submit(answer); an execution without a submitted answer scores 0",
            )  # fmt: skip
        if not self.pending:
            return CheckReport(ok=True)
        positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        errors, warnings = [], []
        for node, code, message, is_error in self.pending:
            pos = positions.get(node)
            line, col = (
                (pos.start.line, pos.start.column) if pos is not None and node is not module else (1, 0)
            )
            (errors if is_error else warnings).append(Diagnostic(line, col, code, message))
        return _report(errors, warnings)


def _refuse_underscore(v: _Visitor, node: cst.CSTNode, name: str, what: str) -> bool:
    if not name.startswith("_") or name == "_":
        return False
    if name.startswith("__"):
        v.error(
            node, "E-DUNDER",
            f"{what} `{name}` is not allowed: double-underscore names reach interpreter internals; "
            "scripts use only the workflow API, their own variables and the builtins",
        )  # fmt: skip
    else:
        v.error(
            node, "E-PRIVATE",
            f"{what} `{name}` is not allowed: names starting with '_' are reserved by the sandbox; "
            f"rename it (e.g. `{name.lstrip('_') or 'x'}`)",
        )  # fmt: skip
    return True
