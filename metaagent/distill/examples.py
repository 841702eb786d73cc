"""SFT examples from rollout records, in the chat ``messages`` format that TRL and verl read.

One JSON object per line::

    {"messages": [{"role": "system", "content": ...}, {"role": "user", "content": ...},
                  {"role": "assistant", "content": ...}],
     "id": "...", "kind": "designer" | "executor", "task_id": ..., "domain": ..., "correct": true, ...}

- a **designer example** is the designer prompt (exactly ``DesignerSample.messages``, the prompt the RL
  designer sees) and, as the assistant turn, the script that was checked and run, in one ```python block
  (a teacher's prose around the script is dropped: the script is what was judged);
- an **executor example** is one agent call of an execution: ``AgentTurn.messages`` (system prompt with the
  team protocol, the agent's memory, the message) and the reply as generated (with its ``</delivery>``).

Only the final assistant message is the training target; earlier assistant messages in an agent's memory
are context, as in the rollout, where each call is its own sample. Every line has the same fields
(:data:`EXAMPLE_FIELDS`: flat scalars and a list of strings, -1 / "" where a field does not apply to the
kind), so ``datasets.load_dataset("json", data_files=[designer, executor])`` reads both files as one
dataset and parquet conversion for verl works.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from metaagent.data.chat import ExampleError, example_id
from metaagent.records import DESIGNER, EXECUTOR, Design, Execution, RolloutTree

from .variation import fenced

KINDS = (DESIGNER, EXECUTOR)


def is_correct(execution: Execution) -> bool | None:
    """True/False when the execution was scored; None when its reward could not be computed."""
    r = execution.reward
    if r is None or r.total is None or r.correct is None:
        return None
    return r.correct >= 1.0


def _structure(design: Design) -> tuple[str, str]:
    s = design.structure or {}
    return str(s.get("structure", "other")), str(s.get("pattern", "other"))


def _level(tree: RolloutTree) -> int:
    level = (tree.task.get("metadata") or {}).get("level")
    return int(level) if isinstance(level, int) else -1


#: every example line has exactly these fields (one schema for both files, so they load as one dataset)
EXAMPLE_FIELDS: dict[str, Any] = {
    "messages": None,
    "id": "",
    "kind": "",
    "task_id": "",
    "domain": "",
    "level": -1,
    "source": "",
    "seed": 0,
    "structure": "",
    "pattern": "",
    "design": -1,
    "template": "",  # designer, template-only: the template the reply was made from
    "templates_shown": [],  # designer: in-context templates in the prompt
    "agent": "",  # executor: the agent's role name
    "execution": -1,  # executor: execution index within the design
    "turn": -1,  # executor: agent call index within the execution
    "model": "",
    "correct": None,  # True for kept examples; False/None (unscored) only with keep_all
    "reward": None,
    "finish_reason": "",
}


def _row(messages: list[dict[str, str]], kind: str, shape: dict[str, Any], **fields: Any) -> dict[str, Any]:
    row = {k: (list(v) if isinstance(v, list) else v) for k, v in EXAMPLE_FIELDS.items()}
    row.update(shape, **fields, messages=messages, id=example_id(messages), kind=kind)
    unknown = set(row) - set(EXAMPLE_FIELDS)
    if unknown:
        raise ExampleError(f"example fields {sorted(unknown)} are not in EXAMPLE_FIELDS; add them there")
    return row


@dataclass
class TreeExamples:
    """The examples of one task's tree, and what was seen while extracting them."""

    designer: list[dict[str, Any]] = field(default_factory=list)
    executor: list[dict[str, Any]] = field(default_factory=list)
    designs: int = 0
    valid_designs: int = 0
    accepted_designs: int = 0
    executions: int = 0
    scored: int = 0
    correct: int = 0
    unscored: int = 0


def tree_examples(tree: RolloutTree, *, source: str, keep_all: bool = False) -> TreeExamples:
    """Designer and executor examples of one tree.

    A design is accepted when at least one of its executions is correct; its designer example is kept,
    and so are the executor examples of its correct executions. With ``keep_all`` every valid design and
    every execution's turns are kept, labelled with ``correct`` (None for an unscored execution).

    Args:
        source: "teacher" or "template": how the designer reply was made (recorded per example).
    """
    out = TreeExamples()
    task = tree.task
    base = {
        "task_id": tree.task_id,
        "domain": str(task.get("domain")),
        "level": _level(tree),
        "source": source,
        "seed": int(tree.seed),
    }
    for d in tree.designs:
        out.designs += 1
        if not d.valid:
            continue
        out.valid_designs += 1
        verdicts = [is_correct(e) for e in d.executions]
        out.executions += len(verdicts)
        out.scored += sum(v is not None for v in verdicts)
        out.correct += sum(v is True for v in verdicts)
        out.unscored += sum(v is None for v in verdicts)
        accepted = any(v is True for v in verdicts)
        out.accepted_designs += int(accepted)
        structure, pattern = _structure(d)
        shape = {**base, "structure": structure, "pattern": pattern, "design": d.index}
        rewards = [
            e.reward.total for e in d.executions if e.reward is not None and e.reward.total is not None
        ]
        if d.sample is not None and (accepted or keep_all):
            messages = [*d.sample.messages, {"role": "assistant", "content": fenced(d.script or "")}]
            out.designer.append(
                _row(
                    messages,
                    DESIGNER,
                    shape,
                    template=d.source.split(":", 1)[1] if d.source.startswith("template:") else "",
                    templates_shown=list(d.sample.templates),
                    model=d.sample.model,
                    correct=accepted,
                    reward=(sum(rewards) / len(rewards)) if rewards else None,
                    finish_reason=d.sample.finish_reason,
                )
            )
        for e, verdict in zip(d.executions, verdicts):
            if not (verdict is True or keep_all):
                continue
            for turn in e.turns:
                messages = [*turn.messages, {"role": "assistant", "content": turn.response}]
                out.executor.append(
                    _row(
                        messages,
                        EXECUTOR,
                        shape,
                        agent=turn.role,
                        execution=e.index,
                        turn=turn.index,
                        model=turn.model,
                        correct=verdict,
                        reward=e.reward.total if e.reward is not None else None,
                        finish_reason=turn.finish_reason,
                    )
                )
    return out
