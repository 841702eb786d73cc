"""One task record for all domains."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from metaagent.errors import MetaAgentError

DOMAINS = ("math", "code", "plan", "qa")  # plan: a host-side environment (metaagent.envs), metadata["env"]; qa: short answers scored by F1 (UnityMAS-O)
ADHOC = "adhoc"  # split of tasks without a reference answer or tests


class TaskError(MetaAgentError, ValueError):
    """A task record is malformed; the message names the field and what it should be."""


@dataclass
class Task:
    """A math or code task.

    Math tasks carry a gold ``answer``; code tasks carry ``tests`` in the normalised form produced by the
    loaders (see :mod:`metaagent.execution.code`), and may carry ``public_tests`` that workflow tools may run
    and ``starter_code`` for call-based problems.
    """

    id: str
    domain: str
    question: str
    answer: str | None = None
    tests: Any = None
    source: str = ""
    split: str = "train"
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise TaskError(f"task id must be a non-empty string, got {self.id!r}")
        if self.domain not in DOMAINS:
            raise TaskError(f"task {self.id}: domain must be one of {DOMAINS}, got {self.domain!r}")
        if not isinstance(self.question, str) or not self.question.strip():
            raise TaskError(f"task {self.id}: question must be a non-empty string")
        if self.split == ADHOC:
            return  # an ad-hoc task (e.g. a served question) has no reference and gets no correctness reward
        if self.domain == "math" and (self.answer is None or not str(self.answer).strip()):
            raise TaskError(f"task {self.id}: a math task needs a gold 'answer' (or split={ADHOC!r} for none)")
        if self.domain == "qa" and not (self.answer or self.metadata.get("answers")):
            raise TaskError(f"task {self.id}: a qa task needs a gold 'answer' or metadata.answers (or split={ADHOC!r})")
        if self.domain == "code" and not self.tests:
            raise TaskError(f"task {self.id}: a code task needs 'tests' (or split={ADHOC!r} for none)")
        if self.domain == "plan" and not isinstance(self.metadata.get("env"), Mapping):
            raise TaskError(f"task {self.id}: a plan task needs metadata['env'] (name, seed, size)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Task:
        if isinstance(data, Task):
            return data
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise TaskError(f"unknown task field(s) {sorted(unknown)}; allowed: {sorted(names)}")
        return cls(**dict(data))

    @classmethod
    def coerce(cls, task: Task | Mapping[str, Any] | str, *, domain: str = "math") -> Task:
        """Accept a Task, a task dict, or a bare question string (an ad-hoc task without reference)."""
        if isinstance(task, Task):
            return task
        if isinstance(task, str):
            return cls(id=ADHOC, domain=domain, question=task, source=ADHOC, split=ADHOC)
        return cls.from_dict(task)

    @property
    def has_reference(self) -> bool:
        if self.domain == "plan":
            return isinstance(self.metadata.get("env"), Mapping)
        if self.domain == "qa":
            return bool(self.answer or self.metadata.get("answers"))
        return self.answer is not None if self.domain == "math" else bool(self.tests)
