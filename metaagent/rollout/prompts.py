"""The designer prompt: role, workflow API (generated from the API source), k in-context templates, task.

One builder for training rollouts, distillation (the teacher sees the same prompt) and serving.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from metaagent.data.tasks import Task

DESIGNER_SYSTEM = """\
You are the designer of a multi-agent team. For the task you are given, write a short Python workflow \
script that creates a team of agents, lets them work on the task, and submits the team's final answer.

The script runs in a sandbox with this API (nothing else is available: no imports, no files, no network):

{api}
Reply with the complete script in one ```python block and nothing after it."""

DOMAIN_HINTS = {
    "math": "The final answer must be submitted in \\boxed{}.",
    "code": "The final answer must be a complete Python program in a ```python block.",
    "qa": "The final answer is a short phrase (a name, date or number); tools: retrieve(query).",
}


def select_templates(templates: Sequence, task: Task, k: int, rng: random.Random, selection: str = "domain") -> list:
    """Pick k distinct templates; "domain" prefers templates whose domains include the task's domain."""
    if k <= 0 or not templates:
        return []
    pool = list(templates)
    if selection == "domain":
        matching = [t for t in pool if task.domain in t.domains]
        pool = matching or pool
    return rng.sample(pool, min(k, len(pool)))


def format_template(t) -> str:
    return f"# Example: {t.name} ({t.structure}) - {t.description}\n```python\n{t.source.strip()}\n```"


def designer_messages(task: Task, examples: Sequence, *, api: str | None = None) -> list[dict[str, str]]:
    """Chat messages that ask the designer for a workflow script for ``task``."""
    if api is None:
        from metaagent.workflow import api_reference

        api = api_reference()
    parts = []
    if examples:
        parts.append("Example workflows:\n\n" + "\n\n".join(format_template(t) for t in examples))
    parts.append(f"Task domain: {task.domain}. {DOMAIN_HINTS.get(task.domain, '')}".strip())
    parts.append(f"Task:\n{task.question.strip()}")
    parts.append("Write the workflow script for this task.")
    return [
        {"role": "system", "content": DESIGNER_SYSTEM.format(api=api.strip() + "\n")},
        {"role": "user", "content": "\n\n".join(parts)},
    ]
