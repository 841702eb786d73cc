"""What kind of team a script builds, read from its syntax (libcst) without running it.

``analyze_script(source)`` returns a JSON dict stored as ``Design.structure`` and read by the replay tool
for the paper's Tables 6, 9 and 10:

- ``structure``: the coarse class, one of :data:`STRUCTURES` (single, reflection, ensemble, solver-tester,
  debate, other);
- ``pattern``: the finer template-level label, one of :data:`PATTERNS` (each maps to one structure);
- ``family``: the paper's three-way taxonomy of Table 6 / Table 10 (single, reflection, ensemble, other);
- ``tags``: features (loop, parallel, vote, judge, critic, tests, tool, plan, decompose, ...);
- ``roles``, ``system_prompts``, ``num_agents``, ``num_call_sites``, ``loops``, ``uses_parallel``,
  ``uses_tools``, ``tools``, ``submits``, ``parse_ok``.

Rules, in order (first match wins):

1. no agent call -> other;
2. the public tests are run (``run_tests``), or a program is run next to a tester role -> solver-tester;
3. agents answer in parallel inside a loop (rounds), or debate roles -> debate;
4. a program is run (``run_program``) -> tool-pair (a reasoner and a coder whose code is executed);
5. decomposition roles (decomposer / merger) -> decompose;
6. a fan-out (``parallel``, a comprehension or a loop over several answers): another agent aggregates ->
   ensemble-judge; one agent voted on -> self-consistency; else -> ensemble;
7. refinement (an agent called again after another agent, a loop over two or more agents, or one agent
   called again to revise, or a critic-like role) -> verifier when the checking role verifies/checks,
   else reflection;
8. a planner role -> plan-solve; one call -> single; several agents in a row -> pipeline.

Role-name cues are matched on the lower-cased role name (e.g. "MathCritic" -> critic).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import libcst as cst

from . import rules

STRUCTURES = ("single", "reflection", "ensemble", "solver-tester", "debate", "other")
PATTERN_STRUCTURE = {
    "single": "single",
    "self-consistency": "ensemble",
    "ensemble-judge": "ensemble",
    "ensemble": "ensemble",
    "reflection": "reflection",
    "verifier": "reflection",
    "solver-tester": "solver-tester",
    "debate": "debate",
    "plan-solve": "other",
    "decompose": "other",
    "tool-pair": "other",
    "pipeline": "other",
    "other": "other",
}
PATTERNS = tuple(PATTERN_STRUCTURE)
#: the paper's Table 6/10 taxonomy: a solver-tester loop repairs from feedback (reflection); a debate is
#: parallel agents plus aggregation (ensemble)
STRUCTURE_FAMILY = {
    "single": "single",
    "reflection": "reflection",
    "solver-tester": "reflection",
    "ensemble": "ensemble",
    "debate": "ensemble",
    "other": "other",
}

#: role-name cues (regular expressions on the lower-cased role name)
ROLE_CUES = {
    "critic": r"critic|review|verif|check|inspect|audit|evaluat|grader",
    "verifier": r"verif|check",
    "tester": r"test",
    "judge": r"judge|select|arbit|aggregat|referee",
    "debate": r"debat|oppon|propon|advocat|skeptic",
    "plan": r"plan",
    "decompose": r"decompos|split|subproblem|breakdown",
    "merge": r"merg|combiner|synthes|integrat|assembl",
}
FAN_OUT_FUNCTIONS = ("parallel",)


@dataclass
class _Site:
    """One agent call site in source order."""

    agents: frozenset[str]  # identities of the agents it may call ("?" when unknown)
    loops: tuple[int, ...]  # enclosing for/while loops that do not iterate over agents (rounds, retries)
    fan_out: bool  # parallel(...), or a call inside a comprehension
    over_agents: bool  # inside a loop or comprehension that iterates over a list of agents


@dataclass
class _Agent:
    identity: str
    role: str
    system_prompt: str
    count: int
    memory: bool = True


class _Scan(cst.CSTVisitor):
    """Agents (constructions), which variables hold them, and every agent call site."""

    def __init__(self) -> None:
        super().__init__()
        self.agents: list[_Agent] = []
        self.constructions: dict[int, str] = {}  # id(Agent(...) call node) -> identity
        self.agent_vars: dict[str, set[str]] = {}  # variable -> identities it may hold
        self.sites: list[_Site] = []
        self.calls: list[str] = []  # names of all called functions, in order
        self.loops: list[tuple[int, bool, bool]] = []  # (id, iterates over agents, is a statement loop)
        self.comp_depth = 0
        self.functions = 0
        self.next_loop = 0

    # ---- agent constructions -------------------------------------------------------------------------------
    def _construction(self, node: cst.BaseExpression, count: int = 1) -> str | None:
        """The identity of an ``Agent(...)`` call (recorded on first sight), else None."""
        if not (
            isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "Agent"
        ):
            return None
        if id(node) in self.constructions:
            return self.constructions[id(node)]
        args = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        role = positional[0] if positional else args.get("name")
        prompt = positional[1] if len(positional) > 1 else args.get("system_prompt")
        memory = positional[2] if len(positional) > 2 else args.get("memory")
        identity = f"agent{len(self.agents)}"
        self.constructions[id(node)] = identity
        self.agents.append(
            _Agent(
                identity=identity,
                role=_text(role),
                system_prompt=_text(prompt),
                count=count,
                memory=not (isinstance(memory, cst.Name) and memory.value == "False"),
            )
        )
        return identity

    def _agents_in(self, node: cst.BaseExpression) -> set[str]:
        """Identities of the agents an expression holds: a construction, a variable, a list of them."""
        one = self._construction(node)
        if one is not None:
            return {one}
        if isinstance(node, cst.Name):
            return set(self.agent_vars.get(node.value, ()))
        if isinstance(node, (cst.List, cst.Tuple)):
            return (
                set().union(*(self._agents_in(el.value) for el in node.elements)) if node.elements else set()
            )
        if isinstance(node, cst.ListComp):
            one = self._construction(node.elt, _comp_count(node))
            return {one} if one is not None else self._agents_in(node.elt)
        if isinstance(node, cst.BinaryOperation):  # [solver] * 3, solvers + [extra]
            return self._agents_in(node.left) | self._agents_in(node.right)
        if isinstance(node, cst.Subscript):  # solvers[0], solvers[:2]
            return self._agents_in(node.value)
        return set()

    def visit_Assign(self, node: cst.Assign) -> None:
        held = self._agents_in(node.value)
        for target in node.targets:
            for name in _names(target.target):
                if held:
                    self.agent_vars[name] = held
                else:
                    self.agent_vars.pop(name, None)

    # ---- loops -----------------------------------------------------------------------------------------------
    def _iterates_agents(self, iterable: cst.BaseExpression, target: cst.BaseExpression) -> bool:
        held = self._agents_in(iterable)
        if (
            isinstance(iterable, cst.Call)
            and isinstance(iterable.func, cst.Name)
            and iterable.func.value in ("zip", "enumerate")
        ):
            for a in iterable.args:
                held |= self._agents_in(a.value)
        if held:
            for name in _names(target):
                self.agent_vars[name] = held
        return bool(held)

    def visit_For(self, node: cst.For) -> None:
        self.loops.append((self.next_loop, self._iterates_agents(node.iter, node.target), True))
        self.next_loop += 1

    def leave_For(self, original_node: cst.For) -> None:
        self.loops.pop()

    def visit_While(self, node: cst.While) -> None:
        self.loops.append((self.next_loop, False, True))
        self.next_loop += 1

    def leave_While(self, original_node: cst.While) -> None:
        self.loops.pop()

    def _enter_comprehension(self, node: cst.BaseComp) -> None:
        self.comp_depth += 1
        self.loops.append(
            (self.next_loop, self._iterates_agents(node.for_in.iter, node.for_in.target), False)
        )
        self.next_loop += 1

    def _leave_comprehension(self, original_node: cst.BaseComp) -> None:
        self.comp_depth -= 1
        self.loops.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _enter_comprehension
    leave_ListComp = leave_SetComp = leave_DictComp = leave_GeneratorExp = _leave_comprehension

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions += 1

    # ---- calls -----------------------------------------------------------------------------------------------
    def _site(self, agents: set[str], fan_out: bool) -> None:
        plain_loops = tuple(i for i, over, statement in self.loops if statement and not over)
        over_agents = any(over for _, over, _ in self.loops)
        self.sites.append(
            _Site(frozenset(agents or {"?"}), plain_loops, fan_out or self.comp_depth > 0, over_agents)
        )

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name):
            self.calls.append(func.value)
            if func.value == "Agent":
                self._construction(node)
            elif func.value in FAN_OUT_FUNCTIONS and node.args:
                self._site(self._agents_in(node.args[0].value), True)
            elif func.value in self.agent_vars:
                self._site(set(self.agent_vars[func.value]), False)
        elif isinstance(func, cst.Subscript) and self._agents_in(func.value):
            self._site(self._agents_in(func.value), False)
        elif isinstance(func, cst.Call) and self._construction(func) is not None:
            self._site({self._construction(func)}, False)  # type: ignore[arg-type]


def _names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for el in target.elements for n in _names(el.value)]
    return []


def _comp_count(node: cst.ListComp) -> int:
    """How many items a comprehension makes, when the iterable says so (range(3), a literal list)."""
    it = node.for_in.iter
    if (
        isinstance(it, cst.Call)
        and isinstance(it.func, cst.Name)
        and it.func.value == "range"
        and len(it.args) == 1
    ):
        value = it.args[0].value
        if isinstance(value, cst.Integer):
            return int(value.evaluated_value)
    if isinstance(it, (cst.List, cst.Tuple)):
        return len(it.elements)
    return 1


def _text(node: cst.BaseExpression | None) -> str:
    """The text of a string literal; f-strings keep their {placeholders}; other expressions: "?"."""
    if node is None:
        return "?"
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else "?"
    if isinstance(node, cst.ConcatenatedString):
        return _text(node.left) + _text(node.right)
    if isinstance(node, cst.FormattedString):
        parts = []
        for part in node.parts:
            if isinstance(part, cst.FormattedStringText):
                parts.append(part.value)
            else:
                parts.append("{" + cst.Module([]).code_for_node(part.expression) + "}")
        return "".join(parts)
    return "?"


def _cue(roles: list[str], cue: str) -> bool:
    return any(re.search(ROLE_CUES[cue], r.lower()) for r in roles)


def _classify(scan: _Scan, roles: list[str], identities: set[str]) -> tuple[str, set[str]]:
    sites = scan.sites
    tags: set[str] = set()
    calls = set(scan.calls)
    if not sites:
        return "other", tags
    in_loop = [s for s in sites if s.loops]
    if in_loop:
        tags.add("loop")
    if "parallel" in calls:
        tags.add("parallel")
    if "majority" in calls:
        tags.add("vote")
    if "run_tests" in calls:
        tags.add("tests")
    if "run_program" in calls:
        tags.add("tool")
    if scan.functions:
        tags.add("helper-function")
    if any(not a.memory for a in scan.agents):
        tags.add("memory-off")
    for cue in ("critic", "judge", "plan", "decompose", "merge", "tester", "debate"):
        if _cue(roles, cue):
            tags.add(cue)
    fan_sites = [s for s in sites if s.fan_out or s.over_agents]
    fanned = set().union(*(s.agents for s in fan_sites)) if fan_sites else set()
    if fan_sites:
        tags.add("fan-out")

    if "run_tests" in calls or ("run_program" in calls and "tester" in tags):
        return "solver-tester", tags
    rounds = any(s.loops for s in fan_sites)  # answering together, again and again
    if rounds or "debate" in tags:
        return "debate", tags
    if "run_program" in calls:
        return "tool-pair", tags
    if "decompose" in tags:
        return "decompose", tags
    if fan_sites:
        first_fan = sites.index(fan_sites[0])
        aggregators = {
            a for s in sites[first_fan + 1 :] if not (s.fan_out or s.over_agents) for a in s.agents
        } - fanned
        if aggregators:
            tags.add("judge")
            return "ensemble-judge", tags
        if "vote" in tags or len(fanned - {"?"}) <= 1:
            return "self-consistency", tags
        return "ensemble", tags
    if _refines(sites, identities) or ("critic" in tags and len(identities) >= 2):
        return ("verifier" if "verifier" in _role_tags(roles) else "reflection"), tags
    if "plan" in tags and len(identities) >= 2:
        return "plan-solve", tags
    if len(sites) == 1 and not in_loop:
        return "single", tags
    if len(identities) >= 2:
        return "pipeline", tags
    return "other", tags


def _role_tags(roles: list[str]) -> set[str]:
    return {cue for cue in ROLE_CUES if _cue(roles, cue)}


def _refines(sites: list[_Site], identities: set[str]) -> bool:
    """An agent called again after another one, a loop over two or more agents, or a self-revision."""
    order = [next(iter(s.agents)) for s in sites if len(s.agents) == 1]
    for i, a in enumerate(order):
        if any(b != a for b in order[:i]) and a in order[:i]:
            return True
    loops: dict[int, set[str]] = {}
    for s in sites:
        for loop in s.loops:
            loops.setdefault(loop, set()).update(s.agents)
    if any(len(agents) >= 2 for agents in loops.values()):
        return True
    return len(identities) == 1 and (len(sites) >= 2 or any(s.loops for s in sites))


def analyze_script(source: str) -> dict[str, Any]:
    """Structure, roles and features of a workflow script (JSON types). Never raises."""
    result: dict[str, Any] = {
        "parse_ok": False,
        "structure": "other",
        "pattern": "other",
        "family": "other",
        "tags": [],
        "roles": [],
        "system_prompts": [],
        "num_agents": 0,
        "num_call_sites": 0,
        "loops": False,
        "uses_parallel": False,
        "uses_tools": False,
        "tools": [],
        "submits": False,
    }
    if not isinstance(source, str) or len(source) > rules.MAX_SCRIPT_CHARS:
        return result
    from .checker import _precheck  # the same parser guard as the checker: libcst never sees deep nesting

    if _precheck(source) is not None:
        return result
    try:
        module = cst.parse_module(source)
        scan = _Scan()
        module.visit(scan)
    except (cst.ParserSyntaxError, RecursionError, ValueError):
        return result
    roles = [a.role for a in scan.agents]
    identities = {a.identity for a in scan.agents}
    pattern, tags = _classify(scan, roles, identities)
    structure = PATTERN_STRUCTURE[pattern]
    tools = sorted({c for c in scan.calls if c in rules.DEFAULT_TOOL_NAMES})
    result.update(
        parse_ok=True,
        structure=structure,
        pattern=pattern,
        family=STRUCTURE_FAMILY[structure],
        tags=sorted(tags),
        roles=roles,
        system_prompts=[a.system_prompt for a in scan.agents],
        num_agents=sum(a.count for a in scan.agents),
        num_call_sites=len(scan.sites),
        loops=any(s.loops for s in scan.sites),
        uses_parallel="parallel" in scan.calls,
        uses_tools=bool(tools),
        tools=tools,
        submits="submit" in scan.calls,
    )
    return result
