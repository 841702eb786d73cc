"""The designer prompt, in two styles, built here for rollouts, distillation, SFT data, evaluation and serving.

- ``full``: role, the workflow API reference (generated from the API source), k in-context templates, task.
  For teachers and untrained models (about 1,300 tokens with one template).
- ``compact``: role, a short API summary (:data:`COMPACT_API`), no examples, task (about 250 tokens with a
  short task). For designers that were trained on it (the cold start of ``scripts/make_cold_start.sh``).

``auto`` (the rollout default) follows the model: a model folder that holds :data:`PROMPT_FILE` (written by
``metaagent-sft`` and shipped with the cold-start adapter) gets the style it was trained on, any other model
``full``.

The **domain hint** (``rollout.domain_hint``, issue 62) is the sentence ``Task domain: <domain>.`` of both
styles: ``on`` shows it, ``off`` leaves it out, so a designer cannot split its choices by a label the task
text does not carry. ``off`` keeps the domain's answer hint of the ``full`` style (``Domain.answer_hint``: the
final answer's format, e.g. ``\\boxed{}``; no built-in hint names its domain); the ``compact`` style has none.
``auto`` follows the model as the style does (:data:`PROMPT_FILE` records both; a file without the key, and
any other model: ``on``, the prompt every model before the key was trained on).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

from metaagent.data.tasks import Task
from metaagent.domain import get_domain
from metaagent.policy.models import PROMPT_FILE, resolve_model
from metaagent.workflow import api_reference

from .budget import budget_line

DESIGNER_SYSTEM = """\
You are the designer of a multi-agent team. For the task you are given, write a short Python workflow \
script that creates a team of agents, lets them work on the task, and submits the team's final answer.

The script runs in a sandbox with this API (nothing else is available: no imports, no files, no network):

{api}
Reply with the complete script in one ```python block and nothing after it."""



#: the styles of :func:`designer_messages`; ``auto`` resolves to one of them (:func:`resolve_designer_prompt`)
DESIGNER_PROMPTS = ("full", "compact")
DESIGNER_PROMPT_CHOICES = ("auto", *DESIGNER_PROMPTS)

#: the settings of the designer prompt's domain sentence; ``auto`` resolves to one (:func:`resolve_domain_hint`)
DOMAIN_HINTS = ("on", "off")
DOMAIN_HINT_CHOICES = ("auto", *DOMAIN_HINTS)
#: the domain sentence that ``domain_hint: on`` shows (both styles)
DOMAIN_LINE = "Task domain: {domain}."


def _on_off(value: Any) -> Any:
    """YAML reads a bare ``on`` / ``off`` as true / false: both spellings mean the same setting."""
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


#: the type of a ``domain_hint`` config field: ``on``, ``off`` (or YAML's true / false) or ``auto``
DomainHint = Annotated[Literal[DOMAIN_HINT_CHOICES], BeforeValidator(_on_off)]


COMPACT_SYSTEM = """\
You design a team of agents for a task. Reply with one ```python block: a workflow script, nothing after it.
No imports. `task` is the task text.
Agent(name, system_prompt, memory=True) makes an agent; agent(message) returns its answer.
parallel(agents, messages) calls agents at once and returns a list of answers.
submit(answer) ends the workflow with the final answer; call it once.
boxed(text) gives the last \\boxed{{}} content; majority(items) the most common item.
Code tasks: run_tests(program) returns "PASS..." or "FAIL..."; run_program(program, input) its output.
Write a system prompt for each agent about this task. Math answers go in \\boxed{{}}; a code answer is a \
program in a ```python block."""

#: the compact system prompt (a short API summary; the full reference is metaagent.workflow.api_reference())
COMPACT_API = COMPACT_SYSTEM.format()


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


def designer_messages(
    task: Task,
    examples: Sequence,
    *,
    api: str | None = None,
    style: str = "full",
    domain_hint: bool = True,
    budget: str | None = None,
) -> list[dict[str, str]]:
    """Chat messages that ask the designer for a workflow script for ``task``.

    ``style`` is one of :data:`DESIGNER_PROMPTS`; ``compact`` shows no examples (``examples`` is ignored).
    ``domain_hint`` False leaves out :data:`DOMAIN_LINE` (the ``full`` style keeps the domain's answer hint).
    ``budget`` (``LOW`` / ``HIGH``, :mod:`metaagent.rollout.budget`) adds its line after the task; None: none.
    """
    domain = DOMAIN_LINE.format(domain=task.domain) if domain_hint else ""
    if style == "compact":
        user = "\n\n".join(p for p in (domain, f"Task:\n{task.question.strip()}") if p)
        user = _with_budget(user, budget)
        return [{"role": "system", "content": COMPACT_API}, {"role": "user", "content": user}]
    if style != "full":
        raise ValueError(f"designer prompt style must be one of {DESIGNER_PROMPTS}, got {style!r}")
    if api is None:
        api = api_reference()
    parts = []
    if examples:
        parts.append("Example workflows:\n\n" + "\n\n".join(format_template(t) for t in examples))
    if line := f"{domain} {get_domain(task.domain).answer_hint}".strip():
        parts.append(line)
    parts.append(f"Task:\n{task.question.strip()}")
    parts[-1] = _with_budget(parts[-1], budget)
    parts.append("Write the workflow script for this task.")
    return [
        {"role": "system", "content": DESIGNER_SYSTEM.format(api=api.strip() + "\n")},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def _with_budget(text: str, budget: str | None) -> str:
    """``text`` followed by the budget tag's line (:func:`metaagent.rollout.budget.budget_line`), or as is."""
    return text if budget is None else f"{text}\n\n{budget_line(budget)}"


def _prompt_record(model_dir: str | None) -> dict | None:
    """``model_dir/PROMPT_FILE`` as a dict, or None (no folder, no file)."""
    if not model_dir:
        return None
    path = os.path.join(os.fspath(model_dir), PROMPT_FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        record = json.load(f)
    return record if isinstance(record, dict) else None


def trained_designer_prompt(model_dir: str | None) -> str | None:
    """The designer prompt style recorded in ``model_dir/PROMPT_FILE``, or None (no folder, no file)."""
    style = (_prompt_record(model_dir) or {}).get("designer_prompt")
    return style if style in DESIGNER_PROMPTS else None


def trained_domain_hint(model_dir: str | None) -> bool | None:
    """Whether the designer recorded in ``model_dir/PROMPT_FILE`` was trained with the domain sentence; None
    without the file. A file without the key predates it: every such model was trained with the sentence."""
    record = _prompt_record(model_dir)
    if record is None:
        return None
    return _on_off(record.get("domain_hint", "on")) != "off"


def write_designer_prompt(model_dir, style: str, domain_hint: bool = True) -> None:
    """Record in a model folder which designer prompt it was trained on: the style and the domain hint."""
    if style not in DESIGNER_PROMPTS:
        raise ValueError(f"designer prompt style must be one of {DESIGNER_PROMPTS}, got {style!r}")
    with open(os.path.join(os.fspath(model_dir), PROMPT_FILE), "w") as f:
        json.dump({"designer_prompt": style, "domain_hint": "on" if domain_hint else "off"}, f)
        f.write("\n")


def prompt_style(messages: Sequence[dict[str, str]]) -> str | None:
    """Which style built these designer messages: "compact", "full", or None (neither)."""
    system = messages[0].get("content", "") if messages and messages[0].get("role") == "system" else ""
    if system == COMPACT_API:
        return "compact"
    if system.startswith(DESIGNER_SYSTEM.split("{api}")[0]):
        return "full"
    return None


def prompt_domain_hint(messages: Sequence[dict[str, str]]) -> bool:
    """Whether these designer messages carry the domain sentence (a paragraph of the user message before the
    task that starts like :data:`DOMAIN_LINE`)."""
    user = next((m.get("content", "") for m in messages if m.get("role") == "user"), "")
    head = DOMAIN_LINE.split("{")[0]
    for paragraph in user.split("\n\n"):
        if paragraph.startswith("Task:\n"):
            return False
        if paragraph.startswith(head):
            return True
    return False


def designer_prompt_of_examples(rows: Sequence[dict]) -> str | None:
    """The one designer prompt style of the designer examples among chat-example ``rows`` (None when there
    are none, or they mix styles or use another prompt)."""
    styles = {prompt_style(r["messages"]) for r in rows if r.get("kind") == "designer"}
    return styles.pop() if len(styles) == 1 else None


def domain_hint_of_examples(rows: Sequence[dict]) -> bool | None:
    """Whether the designer examples among ``rows`` carry the domain sentence: True / False when all agree,
    None when there are none or they mix."""
    hints = {prompt_domain_hint(r["messages"]) for r in rows if r.get("kind") == "designer"}
    return hints.pop() if len(hints) == 1 else None


def _model_dir(policy) -> str | None:
    """The local folder a policy's designer model was loaded from, when it can be told."""
    registry = getattr(policy, "registry", None)
    if registry is not None and hasattr(registry, "for_role"):
        policy = registry.for_role("designer")
    for _ in range(4):  # unwrap BatchingPolicy(backend=...) and similar wrappers
        inner = getattr(policy, "backend", None) or getattr(policy, "inner", None)
        if inner is None or inner is policy:
            break
        policy = inner
    model = getattr(policy, "model", None)
    path = getattr(getattr(model, "config", None), "name_or_path", None)
    if path:
        return str(path)
    model_id = getattr(policy, "model_id", None)
    return str(model_id) if model_id else None


def _designer_folder(policy=None, model: str | None = None) -> str | None:
    """The designer model's folder: ``model`` (an alias or folder, resolved with
    ``metaagent.policy.models.resolve_model``), else the folder ``policy``'s designer model was loaded from."""
    if model is not None:
        try:
            return resolve_model(model)
        except (FileNotFoundError, OSError):
            return None
    return _model_dir(policy) if policy is not None else None


def resolve_designer_prompt(style: str, policy=None, *, model: str | None = None) -> str:
    """``style`` itself unless it is ``auto``; then the style the designer model was trained on, else ``full``.

    The model is ``model`` (an alias or folder, resolved with ``metaagent.policy.models.resolve_model``) or
    the folder ``policy``'s designer model was loaded from.
    """
    if style != "auto":
        if style not in DESIGNER_PROMPTS:
            raise ValueError(f"designer prompt style must be one of {DESIGNER_PROMPT_CHOICES}, got {style!r}")
        return style
    return trained_designer_prompt(_designer_folder(policy, model)) or "full"


def resolve_domain_hint(hint: str | bool, policy=None, *, model: str | None = None) -> bool:
    """Whether the designer prompt shows the domain sentence: ``on`` / ``off`` (or True / False) as given;
    ``auto``: what the designer model was trained with (:func:`trained_domain_hint`), else ``on``. The model
    is found as in :func:`resolve_designer_prompt`."""
    hint = _on_off(hint)
    if hint != "auto":
        if hint not in DOMAIN_HINTS:
            raise ValueError(f"domain_hint must be one of {DOMAIN_HINT_CHOICES}, got {hint!r}")
        return hint == "on"
    trained = trained_domain_hint(_designer_folder(policy, model))
    return True if trained is None else trained
