"""Helpers shared by the workflow tests (a module with a unique name: tests/ has no packages)."""

from __future__ import annotations

import re

from metaagent.policy import ChatRequest

#: small limits so hostile scripts end fast
FAST = {"timeout_s": 2.0, "memory_mb": 256}


def role_reply(request: ChatRequest) -> str:
    """A plausible reply for the agent a request is addressed to (read from its system prompt).

    Math agents answer \\boxed{5}; code agents a program; critics/verifiers approve; planners and
    decomposers list steps. Every reply follows the delivery protocol.
    """
    system = request.messages[0]["content"]
    if re.search(r"CORRECT", system):
        body = "CORRECT"
    elif "VALID" in system:
        body = "VALID"
    elif "plan" in system or "subproblems" in system:
        body = "1. find x\n2. add"
    elif "```python" in system:
        body = "```python\nprint(5)\n```"
    else:
        body = "The answer is \\boxed{5}."
    return f"Let me think step by step.\n<delivery>{body}</delivery>"


def fake_tools(log: list | None = None):
    """Host tools that record their calls and answer instantly."""

    def run_tests(program: str) -> str:
        if log is not None:
            log.append(("run_tests", program))
        return "PASS: 2/2 tests passed (passed)"

    def run_program(program: str, input: str = "") -> str:
        if log is not None:
            log.append(("run_program", program, input))
        return "5"

    return {"run_tests": run_tests, "run_program": run_program}
