"""The workflow script API: the names a designer's script uses to build and run a team.

A script sees the task text as ``task`` and these objects (their docstrings *are* the documentation the
designer reads: :func:`api_reference` renders them, so code and prompt cannot drift apart)::

    solver = Agent("AlgebraSolver", "You solve competition algebra step by step. ...")
    critic = Agent("MathCritic", "You check a proposed solution line by line ...")
    draft = solver(task)
    review = critic(f"Problem:\\n{task}\\n\\nProposed solution:\\n{draft}")
    submit(solver(f"Revise your solution using this review:\\n{review}"))

The objects run inside a sandbox worker (:mod:`metaagent.workflow.worker`). They never talk to a model:
an agent call goes to the worker's *runtime*, which sends "call agent R with messages X" to the host and
returns the text of the reply. The runtime is bound per execution with :func:`bind_runtime`.

Memory: an agent keeps its own conversation (its earlier user messages and full replies), so a later
"revise your solution" call sees its first attempt. ``Agent(..., memory=False)`` answers each call fresh.
Inside one :func:`parallel` call every request sees the agent's memory as it was before the call; the
exchanges are then appended in argument order.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Protocol

from . import rules


class WorkflowStop(BaseException):
    """Ends a script from inside an API call. A BaseException, so ``except Exception`` does not catch it."""


class Submitted(WorkflowStop):
    """submit() was called: the workflow is finished."""


class LimitReached(WorkflowStop):
    """A limit ended the script: the host refused a call (agent-call, token or tool budget spent, message
    too long) or the worker did (answer too long). ``kind`` names the limit."""

    def __init__(self, message: str = "", kind: str = "LimitReached") -> None:
        super().__init__(message)
        self.kind = kind


class Runtime(Protocol):
    """What the worker provides to the API objects for one execution."""

    def call_agents(self, calls: list[tuple[Agent, str]]) -> list[tuple[str, str]]:
        """Ask the host to run the calls; returns (returned text, full response) per call, in order."""

    def call_tool(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str: ...

    def submit(self, answer: str) -> None:
        """Record the final answer (the first one wins) and raise :class:`Submitted`."""


_runtime: Runtime | None = None


def bind_runtime(runtime: Runtime | None) -> None:
    """Install the runtime that serves agent calls of the script now running (None to unbind)."""
    global _runtime
    _runtime = runtime


def _current() -> Runtime:
    if _runtime is None:
        raise RuntimeError("the workflow API only works inside a sandboxed execution (run_script)")
    return _runtime


def _as_text(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise TypeError(
        f"{where} needs text, got {type(value).__name__}; build a string first, "
        "e.g. with an f-string or '\\n'.join(items)"
    )


# ---- the script-visible objects ------------------------------------------------------------------------


class Agent:
    """Create an agent: a role name (e.g. "AlgebraSolver") and a system prompt saying what it does.
    The agent remembers its own conversation, so a later call such as "Revise your solution" sees its
    earlier messages and replies; with memory=False every call starts fresh."""

    __slots__ = ("_history", "memory", "name", "system_prompt")

    def __init__(self, name: str, system_prompt: str, memory: bool = True) -> None:
        if not isinstance(name, str) or not name.strip():
            raise TypeError('Agent needs a role name as text, e.g. Agent("MathSolver", "You solve ...")')
        if not isinstance(system_prompt, str):
            raise TypeError(f'Agent("{name}", ...) needs its system prompt as text')
        if not isinstance(memory, bool):
            raise TypeError(f'Agent("{name}", ..., memory=...) must be True or False')
        self.name = name.strip()
        self.system_prompt = system_prompt
        self.memory = memory
        self._history: list[dict[str, str]] = []

    def __call__(self, message: str) -> str:
        """Send the agent a message and return its deliverable: the text inside its
        <delivery>...</delivery> block (its whole reply if it wrote none)."""
        return parallel([self], [message])[0]

    def __repr__(self) -> str:
        return f"Agent({self.name!r})"

    __str__ = __repr__

    def _remember(self, message: str, response: str) -> None:
        if self.memory:
            self._history.append({"role": "user", "content": message})
            self._history.append({"role": "assistant", "content": response})

    def _messages(self) -> list[dict[str, str]]:
        return list(self._history) if self.memory else []


def parallel(agents: Agent | list[Agent], messages: str | list[str]) -> list[str]:
    """Call several agents at once (they run concurrently) and return their deliverables in order.
    Give a list of agents and one message for all, one agent and a list of messages, or two lists of
    the same length: parallel([a, b, c], task), parallel(solver, [task] * 3), parallel([a, b], [m1, m2])."""
    agent_list = [agents] if isinstance(agents, Agent) else _list_of(agents, "parallel(agents, ...)")
    if isinstance(messages, (str, int, float)):
        message_list = [_as_text(messages, "parallel(..., messages)")]
    else:
        message_list = [
            _as_text(m, "each message of parallel(...)")
            for m in _list_of(messages, "parallel(..., messages)")
        ]
    for a in agent_list:
        if not isinstance(a, Agent):
            raise TypeError(f"parallel(agents, ...) needs Agent objects, got {type(a).__name__}")
    if not agent_list or not message_list:
        return []
    if len(agent_list) == 1 and len(message_list) > 1:
        agent_list = agent_list * len(message_list)
    elif len(message_list) == 1 and len(agent_list) > 1:
        message_list = message_list * len(agent_list)
    if len(agent_list) != len(message_list):
        raise ValueError(
            f"parallel got {len(agent_list)} agents and {len(message_list)} messages; give one message for all "
            "agents, one agent for all messages, or lists of the same length"
        )
    calls = list(zip(agent_list, message_list))
    replies = _current().call_agents(calls)
    for (agent, message), (_, response) in zip(calls, replies):
        agent._remember(message, response)
    return [text for text, _ in replies]


def submit(answer: str) -> None:
    """End the workflow with the team's final answer (math: include \\boxed{...}; code: the program in a
    ```python block). Call it exactly once: a script that never submits has no answer and scores 0."""
    _current().submit(_as_text(answer, "submit(answer)"))


def boxed(text: str) -> str:
    """The content of the last \\boxed{...} in text ("" if there is none). Handy for comparing answers."""
    text = _as_text(text, "boxed(text)")
    start = text.rfind("\\boxed{")
    while start >= 0:
        i, depth = start + len("\\boxed{"), 1
        for j in range(i, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[i:j].strip()
        start = text.rfind("\\boxed{", 0, start)  # unbalanced: try an earlier one
    return ""


def majority(items: list[str]) -> str:
    """The most common non-empty item of a list (the earliest one wins ties; "" if there is none),
    e.g. majority([boxed(s) for s in solutions])."""
    values = [v for v in _list_of(items, "majority(items)") if v is not None and v != ""]
    if not values:
        return ""
    counts = [sum(1 for w in values if w == v) for v in values]  # equality only: no hashing, deterministic
    return values[counts.index(max(counts))]


def _list_of(value: Any, where: str) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    raise TypeError(f"{where} needs a list, got {type(value).__name__}")


#: the objects a script's namespace holds, by name (the worker adds `task`, tools and guards)
SCRIPT_API: dict[str, Any] = {
    "Agent": Agent,
    "parallel": parallel,
    "submit": submit,
    "boxed": boxed,
    "majority": majority,
}
assert tuple(SCRIPT_API) == rules.API_NAMES, "rules.API_NAMES must list the API objects"


# ---- the designer's documentation ------------------------------------------------------------------------


def _signature(name: str, obj: Any, *, skip_self: bool = False, returns: str | None = None) -> str:
    """``name(param: annotation = default, ...) -> returns`` from the object's real signature."""
    sig = inspect.signature(obj)
    parts = []
    for p in list(sig.parameters.values())[1 if skip_self else 0 :]:
        text = p.name
        if p.annotation is not inspect.Parameter.empty:
            text += f": {p.annotation}"
        if p.default is not inspect.Parameter.empty:
            text += f" = {p.default!r}"
        parts.append(text)
    if returns is None and sig.return_annotation is not inspect.Signature.empty:
        returns = str(sig.return_annotation)
    return f"{name}({', '.join(parts)})" + (f" -> {returns}" if returns else "")


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return "\n".join("    " + line for line in doc.splitlines())


def api_reference(tool_names: Sequence[str] | None = rules.DEFAULT_TOOL_NAMES) -> str:
    """The workflow API as the designer reads it, rendered from the API objects and the allow-lists."""
    from . import tools as tool_module

    entries = [
        (_signature("Agent", Agent.__init__, skip_self=True, returns="Agent"), Agent),
        (_signature("agent", Agent.__call__, skip_self=True), Agent.__call__),
        (_signature("parallel", parallel), parallel),
        (_signature("submit", submit), submit),
        (_signature("boxed", boxed), boxed),
        (_signature("majority", majority), majority),
    ]
    for name in tool_names or ():
        fn = tool_module.TOOL_DOCS.get(name)
        if fn is not None:
            entries.append((_signature(name, fn, skip_self=True) + "   [tool]", fn))
    lines = [f"`{rules.TASK_NAME}` (str) is the task text. Functions:", ""]
    for sig, obj in entries:
        lines += [sig, _doc(obj)]
    lines += [
        "",
        "Also available: print, " + ", ".join(rules.SAFE_BUILTINS) + ";",
        "exceptions " + ", ".join(rules.SAFE_EXCEPTIONS) + ".",
        "Strings, lists, dicts and sets have their usual methods; build text with f-strings (no str.format).",
        (
            "Not available: imports, classes, global, yield, with, async, eval/exec/open/getattr, "
            'names or attributes starting with "_".'
        ),
    ]
    return "\n".join(lines) + "\n"
