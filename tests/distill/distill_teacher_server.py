"""A minimal OpenAI-compatible teacher on 127.0.0.1 for the distillation tests (stdlib only).

It behaves like a hosted API (text only, no token ids, the stop string removed from the reply, ``usage``
reported) and like a competent teacher on the bundled arithmetic tasks:

- a **designer** prompt (system message "You are the designer ...") is answered with the in-context
  example of the prompt (a complete template script), with a line of prose before the fence;
- an **agent** prompt is answered from the question found in the conversation ("What is 20 + 20?"):
  critics say CORRECT, verifiers VALID, planners give a plan, decomposers one subproblem, everyone else
  the correct value, delivery-tagged and in ``\\boxed{}``;
- the first request of every distinct conversation fails once with 429 (``Retry-After: 0``), so the
  client's retry path is exercised on every call.

``state.designer_calls[question]`` counts designer requests per task question (to check that a resumed
run repeats no finished task); ``delay_s`` slows every answer (to kill a run mid-task).
"""

from __future__ import annotations

import ast
import json
import operator
import re
import threading
import time
from fractions import Fraction
from typing import Any

from builders import StubServer, api_error, chat_completion

QUESTION_RE = re.compile(r"What is ([-\d\s+*/().]+)\?")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand)
    raise ValueError(f"unsupported expression {ast.dump(node)}")


def solve(text: str) -> str | None:
    """The exact value of the first "What is <arithmetic>?" in ``text``."""
    m = QUESTION_RE.search(text)
    if not m:
        return None
    value = _eval(ast.parse(m.group(1).strip(), mode="eval"))
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


class TeacherState:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.lock = threading.Lock()
        self.delay_s = delay_s
        self.requests = 0
        self.failed_once: set[str] = set()
        self.designer_calls: dict[str, int] = {}
        self.agent_calls = 0


def designer_reply(messages: list[dict[str, str]]) -> str:
    user = messages[-1]["content"]
    m = re.search(r"```python\n(.*?)\n```", user, re.DOTALL)
    script = (
        m.group(1)
        if m
        else 'solver = Agent("MathSolver", "Solve it. Answer in \\\\boxed{}.")\nsubmit(solver(task))'
    )
    return f"This team fits the task.\n```python\n{script}\n```"


def agent_reply(messages: list[dict[str, str]]) -> str:
    system = messages[0]["content"]
    value = solve("\n".join(m["content"] for m in messages)) or "0"
    if "CORRECT" in system:
        return "I checked every step. <delivery>CORRECT</delivery>"
    if "VALID" in system:
        return "The final answer checks out. <delivery>VALID</delivery>"
    if "plan" in system.lower() and "Do not solve" in system:
        return "1. Compute the expression.\n<delivery>1. Compute the expression exactly.</delivery>"
    if "smaller subproblems" in system:
        return "<delivery>Compute the value of the expression.</delivery>"
    return f"Computing step by step gives {value}. <delivery>The answer is \\boxed{{{value}}}</delivery>"


def _apply_stop(text: str, stop: list[str] | str | None) -> tuple[str, str]:
    """OpenAI semantics: generation ends *before* the stop string, which is not returned."""
    for s in [stop] if isinstance(stop, str) else (stop or []):
        cut = text.find(s)
        if cut >= 0:
            return text[:cut], "stop"
    return text, "stop"


def make_route(state: TeacherState):
    def route(method: str, path: str, body: Any):
        if method != "POST" or not path.endswith("/chat/completions"):
            return api_error(404, f"no route {path}")
        if any(k in body for k in ("return_token_ids", "include_stop_str_in_output")):
            return api_error(400, "unknown parameter (a hosted API rejects vLLM extras)")
        messages = body["messages"]
        key = json.dumps(messages, sort_keys=True)
        with state.lock:
            state.requests += 1
            first = key not in state.failed_once
            state.failed_once.add(key)
        if first:
            return api_error(429, "rate limited", {"Retry-After": "0"})
        if state.delay_s:
            time.sleep(state.delay_s)
        if messages[0]["content"].startswith("You are the designer"):
            question = messages[-1]["content"].split("Task:\n", 1)[-1].split("\n\n")[0]
            with state.lock:
                state.designer_calls[question] = state.designer_calls.get(question, 0) + 1
            text = designer_reply(messages)
        else:
            with state.lock:
                state.agent_calls += 1
            text = agent_reply(messages)
        text, finish = _apply_stop(text, body.get("stop"))
        prompt_tokens = sum(len(m["content"].split()) for m in messages)
        return 200, chat_completion(body["model"], text, finish=finish, prompt_tokens=prompt_tokens), {}

    return route


class TeacherServer(StubServer):
    """``with TeacherServer() as s: s.base_url`` -> ``http://127.0.0.1:<free port>/v1`` (tests/builders.py)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.state = TeacherState(delay_s)
        super().__init__(make_route(self.state))
