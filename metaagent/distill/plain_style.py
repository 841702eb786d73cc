"""Plain-style designer scripts: the same program written with fewer things a small model gets wrong.

The v1 cold-start designer (SmolLM2-135M) wrote 18 of its 26 invalid scripts with syntax errors, mostly
inside f-strings (a nested f-string with the same quote, a ``{`` never closed) and in lines that close three
brackets at once (``submit(judge(f"...{x}..."))``). :func:`plain_style` rewrites a template variant so the
training target has neither:

- **f-strings become concatenations**: ``f"Problem:\\n{task}\\n\\n{c}"`` -> ``"Problem:\\n" + task + "\\n\\n" + c``.
  An expression that is not a name known to hold a string is wrapped in ``str(...)``, which is what the
  f-string did (``format(x, "")`` is ``str(x)`` for every value a script builds), so the script computes the
  same strings. An f-string with a conversion (``!r``) or a format spec is left as it is.
- **a built prompt gets its own line**: an agent call (or ``parallel``) whose message is such a
  concatenation and that sits inside another call (``submit(judge(...))``) or an assignment takes its message
  from a new ``prompt = ...`` line just above (not inside comprehensions, where the loop variable is local).

The result must pass the workflow checker with the same structure and pattern, else the input comes back.
"""

from __future__ import annotations

import libcst as cst

from metaagent.domain import domain_tool_names

#: names of the workflow API that always hold a string
STR_NAMES = frozenset({"task"})
#: methods of str whose result is a string
STR_METHODS = frozenset({"join", "strip", "replace", "lower", "upper", "lstrip", "rstrip"})
#: tools whose result is a string
STR_CALLS = frozenset({"run_program", "run_tests", "str", "boxed", "env_observe", "env_step", "retrieve"})
#: the name given to a hoisted message, first one not used by the script
HOIST_NAMES = ("prompt", "message", "request")


def _names(module: cst.Module) -> set[str]:
    out: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            out.add(node.value)

    module.visit(V())
    return out


def _agent_names(module: cst.Module) -> set[str]:
    """Names bound to one ``Agent(...)``."""
    out: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            v = node.value
            if isinstance(v, cst.Call) and isinstance(v.func, cst.Name) and v.func.value == "Agent":
                for t in node.targets:
                    if isinstance(t.target, cst.Name):
                        out.add(t.target.value)

    module.visit(V())
    return out


def _is_str_expr(node: cst.BaseExpression, agents: set[str], known: set[str]) -> bool:
    if isinstance(node, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)):
        return True
    if isinstance(node, cst.Name):
        return node.value in known
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return _is_str_expr(node.left, agents, known) or _is_str_expr(node.right, agents, known)
    if isinstance(node, cst.Call):
        f = node.func
        if isinstance(f, cst.Name):
            return f.value in agents or f.value in STR_CALLS
        if isinstance(f, cst.Attribute):
            return f.attr.value in STR_METHODS
    return False


def _str_names(module: cst.Module, agents: set[str]) -> set[str]:
    """Names every binding of which is a string (assignments only; loop and comprehension targets are not)."""
    values: dict[str, list[cst.BaseExpression]] = {}
    other: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for t in node.targets:
                if isinstance(t.target, cst.Name):
                    values.setdefault(t.target.value, []).append(node.value)
                else:
                    other.update(n.value for n in _collect_names(t.target))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if isinstance(node.target, cst.Name):
                values.setdefault(node.target.value, []).append(node.value)

        def visit_For(self, node: cst.For) -> None:
            other.update(n.value for n in _collect_names(node.target))

        def visit_CompFor(self, node: cst.CompFor) -> None:
            other.update(n.value for n in _collect_names(node.target))

    module.visit(V())
    known = set(STR_NAMES)
    changed = True
    while changed:  # a fixed point: `a = "x"`, `b = a + c` -> both strings
        changed = False
        for name, vals in values.items():
            if name not in known and name not in other and all(_is_str_expr(v, agents, known) for v in vals):
                known.add(name)
                changed = True
    return known - agents


def _collect_names(node: cst.CSTNode) -> list[cst.Name]:
    out: list[cst.Name] = []

    class V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            out.append(n)

    node.visit(V())
    return out


_PARENS = {"lpar": [cst.LeftParen()], "rpar": [cst.RightParen()]}


class _FStrings(cst.CSTTransformer):
    """f-strings -> parenthesised concatenations (see :class:`_DropParens` for the parentheses)."""

    def __init__(self, str_names: set[str]) -> None:
        self.str_names = str_names

    def leave_FormattedString(self, original: cst.FormattedString, updated: cst.FormattedString):
        quote = updated.start[len(updated.prefix) :]
        if updated.prefix.lower() != "f" or quote not in ('"', "'"):
            return updated
        pieces: list[cst.BaseExpression] = []
        for part in updated.parts:
            if isinstance(part, cst.FormattedStringText):
                text = part.value.replace("{{", "{").replace("}}", "}")
                if text:
                    pieces.append(cst.SimpleString(quote + text + quote))
                continue
            if part.conversion is not None or part.format_spec is not None:
                return updated
            expr = part.expression
            if isinstance(expr, cst.Name) and expr.value in self.str_names:
                pieces.append(expr.with_changes(lpar=[], rpar=[]))
            else:
                pieces.append(cst.Call(cst.Name("str"), [cst.Arg(expr.with_changes(lpar=[], rpar=[]))]))
        if not pieces:
            return cst.SimpleString(quote * 2)
        if len(pieces) == 1:
            only = pieces[0]
            return (
                only
                if isinstance(only, (cst.SimpleString, cst.Call))
                else cst.Call(cst.Name("str"), [cst.Arg(only)])
            )
        out = pieces[0]
        for p in pieces[1:]:
            out = cst.BinaryOperation(out, cst.Add(), p)
        return out.with_changes(**_PARENS)


class _DropParens(cst.CSTTransformer):
    """Removes the parentheses :class:`_FStrings` put around a concatenation where they are not needed."""

    @staticmethod
    def _bare(node):
        if isinstance(node, cst.BinaryOperation) and node.lpar:
            return node.with_changes(lpar=[], rpar=[])
        return node

    def leave_Arg(self, original, updated):
        return updated.with_changes(value=self._bare(updated.value))

    def leave_Assign(self, original, updated):
        return updated.with_changes(value=self._bare(updated.value))

    def leave_AugAssign(self, original, updated):
        return updated.with_changes(value=self._bare(updated.value))

    def leave_Element(self, original, updated):
        return updated.with_changes(value=self._bare(updated.value))

    def leave_GeneratorExp(self, original, updated):
        return updated.with_changes(elt=self._bare(updated.elt))

    def leave_ListComp(self, original, updated):
        return updated.with_changes(elt=self._bare(updated.elt))

    def leave_BinaryOperation(self, original, updated):
        # `("a" + b) + "c"` inside a concatenation: the left operand needs no parentheses for `+`
        left = updated.left
        add = isinstance(updated.operator, cst.Add)
        if add and isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Add):
            return updated.with_changes(left=self._bare(left))
        return updated


class _ReplaceArg(cst.CSTTransformer):
    """Argument ``index`` of the call ``target`` (by identity) becomes the name ``name``."""

    def __init__(self, target: cst.Call, index: int, name: str) -> None:
        self.target, self.index, self.name = target, index, name

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if original is not self.target:
            return updated
        args = list(updated.args)
        args[self.index] = args[self.index].with_changes(value=cst.Name(self.name))
        return updated.with_changes(args=args)


class _Hoist(cst.CSTTransformer):
    """``submit(judge("a" + b))`` -> ``prompt = "a" + b`` / ``submit(judge(prompt))`` (one per line)."""

    def __init__(self, agents: set[str], name: str) -> None:
        self.agents = agents
        self.name = name

    def _find(self, stmt: cst.BaseSmallStatement):
        """The (call, argument index) to hoist from ``stmt``, or None."""
        found: list = []
        agents = self.agents

        class V(cst.CSTVisitor):
            depth = 0  # comprehension/lambda nesting
            calls = 0  # call nesting

            def visit_GeneratorExp(self, n):
                self.depth += 1

            def leave_GeneratorExp(self, n):
                self.depth -= 1

            def visit_ListComp(self, n):
                self.depth += 1

            def leave_ListComp(self, n):
                self.depth -= 1

            def visit_Lambda(self, n):
                self.depth += 1

            def leave_Lambda(self, n):
                self.depth -= 1

            def visit_Call(self, n: cst.Call):
                self.calls += 1
                if found or self.depth or not isinstance(n.func, cst.Name):
                    return
                f = n.func.value
                index = 0 if f in agents else 1 if f == "parallel" else None
                if index is None or len(n.args) <= index:
                    return
                arg = n.args[index]
                value = arg.value
                if (
                    isinstance(value, cst.BinaryOperation)
                    and isinstance(value.operator, cst.Add)
                    and not arg.keyword
                ):
                    nested = self.calls > 1 or isinstance(stmt, (cst.Assign, cst.AugAssign))
                    if nested:
                        found.append(n)

            def leave_Call(self, n):
                self.calls -= 1

        stmt.visit(V())
        return found[0] if found else None

    def _rewrite(self, body):
        out = []
        for line in body:
            if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
                call = self._find(line.body[0])
                if call is not None:
                    index = 0 if call.func.value in self.agents else 1
                    value = call.args[index].value

                    assign = cst.Assign(
                        [cst.AssignTarget(cst.Name(self.name))], value.with_changes(lpar=[], rpar=[])
                    )
                    out.append(line.with_changes(body=[assign], trailing_whitespace=cst.TrailingWhitespace()))
                    line = line.with_changes(leading_lines=[]).visit(_ReplaceArg(call, index, self.name))
            out.append(line)
        return out

    def leave_Module(self, original, updated):
        return updated.with_changes(body=self._rewrite(updated.body))

    def leave_IndentedBlock(self, original, updated):
        return updated.with_changes(body=self._rewrite(updated.body))


def plain_style(script: str) -> str:
    """``script`` without f-strings and with built prompts on their own lines (module docstring); ``script``
    itself when it does not parse or the rewrite would not pass the checker with the same structure."""
    from metaagent.workflow import analyze_script, check_script, rules

    try:
        module = cst.parse_module(script)
    except cst.ParserSyntaxError:
        return script
    agents = _agent_names(module)
    module = module.visit(_FStrings(_str_names(module, agents))).visit(_DropParens())
    used = _names(module)
    free = [n for n in HOIST_NAMES if n not in used]
    if free:
        module = module.visit(_Hoist(agents, free[0]))
    out = module.code
    before, after = analyze_script(script), analyze_script(out)
    tools = set(rules.DEFAULT_TOOL_NAMES).union(domain_tool_names())
    same = (before["structure"], before["pattern"]) == (after["structure"], after["pattern"])
    if not same or not check_script(out, tool_names=tools).ok:
        return script
    return out
