"""Helpers shared by the server tests (a module with a unique name: tests/ has no packages)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

API_KEY = "test-key-0123456789"

#: a valid two-agent team the scripted designer writes (solver, then a checker that submits)
TEAM_SCRIPT = '''```python
solver = Agent("MathSolver", "You solve math problems step by step.")
checker = Agent("MathChecker", "You check a solution and give the final answer.")
draft = solver(task)
submit(checker(f"Problem: {task}\\nDraft: {draft}"))
```'''
#: a design that never ends: the sandbox must kill it without affecting other requests
HOSTILE_SCRIPT = '''```python
looper = Agent("Looper", "You start counting.")
start = looper(task)
n = 0
while True:
    n = n + 1
submit(start)
```'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """Run an ASGI app with uvicorn in a daemon thread (lifespan on) until the context exits."""

    def __init__(self, app, port: int) -> None:
        import uvicorn

        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="test-uvicorn", daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(60)
        assert not self.thread.is_alive(), "uvicorn did not shut down"


def scripted_models(designer_fn: Callable, executor_fn: Callable):
    """A loader for TeamService that serves scripted designer and executor policies."""
    from metaagent.policy import ScriptedPolicy
    from metaagent.serve import ServeModels

    def load() -> ServeModels:
        designer = ScriptedPolicy(designer_fn, model_id="scripted-designer")
        executor = ScriptedPolicy(executor_fn, model_id="scripted-executor")
        return ServeModels(designer=designer, executor=executor, physical={"d": designer, "e": executor})

    return load


def task_of(request) -> str:
    """The task text in a designer request (the last line block after 'Task:')."""
    text = request.messages[-1]["content"]
    return text.split("Task:\n", 1)[1] if "Task:\n" in text else text


def default_designer(request) -> str:
    return HOSTILE_SCRIPT if "HOSTILE" in task_of(request) else TEAM_SCRIPT


def default_executor(request) -> str:
    system = request.messages[0]["content"]
    if system.startswith("You are a judge"):
        return "Candidate 1 is right. <delivery>1</delivery>"
    if "check a solution" in system:
        return "The draft is right. <delivery>The answer is \\boxed{5}.</delivery>"
    return "2 + 3 = 5. <delivery>5</delivery>"
