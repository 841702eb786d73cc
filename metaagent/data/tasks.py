"""One task record for all domains."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from metaagent.domain import DomainError, get_domain
from metaagent.errors import MetaAgentError

ADHOC = "adhoc"  # split of tasks without a reference answer or tests


class TaskError(MetaAgentError, ValueError):
    """A task record is malformed; the message names the field and what it should be."""


@dataclass
class Task:
    """A task of a registered domain (:mod:`metaagent.domain`; what it needs is the domain's ``needs``).

    Math tasks carry a gold ``answer``; code tasks carry ``tests`` in the normalised form produced by the
    loaders (see :mod:`metaagent.execution.code`), and may carry ``public_tests`` that workflow tools may run
    and ``starter_code`` for call-based problems; plan tasks carry ``metadata["env"]``, qa tasks gold answers.
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
        try:
            domain = get_domain(self.domain)
        except DomainError as e:
            raise TaskError(f"task {self.id}: {e}") from None
        if not isinstance(self.question, str) or not self.question.strip():
            raise TaskError(f"task {self.id}: question must be a non-empty string")
        if self.split == ADHOC:
            return  # an ad-hoc task (e.g. a served question) has no reference and gets no correctness reward
        if not domain.is_valid(self):
            needs = domain.needs or f"its {domain.reference} (or split={ADHOC!r} for none)"
            raise TaskError(f"task {self.id}: a {domain.name} task needs {needs}")

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
        return get_domain(self.domain).has_reference(self)
