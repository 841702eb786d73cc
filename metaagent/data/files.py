"""Your own tasks: a JSONL file, one task a line (the guide: docs/guide/own-tasks.md).

Every row is a JSON object with a non-empty ``question`` and its domain's reference: ``{"question": ...,
"answer": ...}`` for an answer domain (math, qa, or a plugin such as ``arith``), ``"tests"`` for code,
``"env"`` for plan. Optional on every row: ``id`` (default ``<file stem>-<line>``), ``domain`` (default the
spec's ``domain``, else ``math``), ``split`` (a row without one belongs to every split), ``source`` and
``metadata``. The further fields a domain accepts, and where each lands in the
:class:`~metaagent.data.tasks.Task`, are the domain's own (``Domain.row_fields``: code's ``public_tests``,
``fn_name``, ``starter_code``; qa's ``answers``, ``corpus``).

A row that does not fit is one :class:`~metaagent.data.errors.DataError` line naming the file, the line
number and the field (an empty file, a line that is not JSON, an unknown field, a missing reference,
malformed tests).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metaagent.domain import DomainError, get_domain
from metaagent.execution.code_tests import normalize_tests
from metaagent.execution.errors import TestsFormatError

from .errors import DataError
from .sources import Source
from .tasks import Task, TaskError

if TYPE_CHECKING:
    from .loaders import DatasetSpec

SOURCE = (
    "file"  # the data source of a task file: data.train=[{source: file, path: ...}], --benchmarks file:PATH
)
DEFAULT_DOMAIN = "math"  # the domain of a row without one when the spec names none
COMMON_FIELDS = (
    "id",
    "domain",
    "question",
    "split",
    "source",
    "metadata",
)  # every domain's rows may carry them
SUFFIXES = (".jsonl",)  # one JSON object a line (a pretty-printed .json array is not one)
TEST_TARGETS = (
    "tests",
    "metadata.public_tests",
)  # code tests a row gives in any accepted form, checked on load
EXAMPLE = '{"question": "What is 2 + 3?", "answer": "5"}'

Row = tuple[str, int, Any]  # (file, line number, the parsed JSON value)


def read_rows(path: str | Path) -> Iterator[Row]:
    """The non-blank lines of the JSONL file ``path`` as ``(file, line number, JSON value)``; an empty file or
    a line that is not JSON is a :class:`DataError` naming the file and line."""
    path = Path(path)
    if path.is_dir() or path.suffix.lower() not in SUFFIXES:
        raise DataError(f"{path}: a task file is one .jsonl file, one JSON object a line, e.g. {EXAMPLE}")
    empty = True
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            empty = False
            try:
                yield str(path), number, json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path} line {number}: not valid JSON ({e.msg}, column {e.colno})") from None
    if empty:
        raise DataError(f"{path}: the file is empty; write one task a line, e.g. {EXAMPLE}")


def read_tasks(
    spec: DatasetSpec, *, path: str | Path | None = None, domain: str | None = None, label: str = SOURCE
) -> Iterator[Task]:
    """The tasks of the file ``spec.path`` (or ``path``: a source's own file), in file order; rows naming
    another split than ``spec.split`` are left out, and a repeated ``id`` is an error naming both lines.
    ``domain`` is the domain of rows without one when the spec names none, ``label`` their ``source``."""
    path = spec.path if path is None else path
    if path is None:
        raise DataError(f"source {SOURCE!r} reads a task file: give its path, e.g. data.train=[tasks.jsonl]")
    seen: dict[str, int] = {}
    for row in read_rows(path):
        task = row_task(row, spec, domain=domain, label=label)
        if spec.split and task.split != spec.split:
            continue
        if task.id in seen:
            raise DataError(
                f"{row[0]} line {row[1]}: field 'id': {task.id!r} is already the id of line {seen[task.id]}; "
                "ids must be unique"
            )
        seen[task.id] = row[1]
        yield task


def task_file_source(name: str, path: str | Path, *, domain: str, note: str = "") -> Source:
    """A data source ``name`` reading the task file ``path`` (this module's format, rows of ``domain`` unless
    they name one), e.g. a plugin domain's own tasks shipped beside its module:
    ``register_source(task_file_source("arith", Path(__file__).with_name("arith_tasks.jsonl"), domain="arith"))``.
    ``DatasetSpec(name, split="test")`` keeps the rows of split ``test`` and those without a split."""
    path = Path(path)
    return Source(
        name, domain, None, "all", as_task, note=note or f"the task file {path.name}",
        rows=lambda spec: read_tasks(spec, path=path, domain=domain, label=name),
    )  # fmt: skip


def as_task(task: Task, index: int, spec: DatasetSpec) -> Task:
    """The ``file`` source's mapper: :func:`read_tasks` already built the task."""
    return task


def row_task(row: Row, spec: DatasetSpec, *, domain: str | None = None, label: str = SOURCE) -> Task:
    """The task of one row; a row that does not fit is one line naming file, line and field."""
    file, number, data = row
    where = f"{file} line {number}"
    if not isinstance(data, Mapping):
        raise DataError(f"{where}: a task is a JSON object, got {type(data).__name__}; e.g. {EXAMPLE}")
    name = data.get("domain", spec.domain or domain or DEFAULT_DOMAIN)
    try:
        domain = get_domain(name)
    except DomainError as e:
        raise DataError(f"{where}: field 'domain': {e}") from None
    targets = dict(domain.row_fields)
    unknown = sorted(set(data) - set(COMMON_FIELDS) - set(targets))
    if unknown:
        raise DataError(
            f"{where}: unknown field {unknown[0]!r} for a {name} task; allowed: "
            f"{', '.join((*COMMON_FIELDS, *targets))}"
        )
    fields = _common_fields(where, data, Path(file).stem, number, spec, label)
    for key, target in targets.items():
        if key in data:
            _place(fields, target, _value(where, key, data[key]))
    fn_name = fields["metadata"].get("fn_name")
    for key, target in targets.items():
        if key in data and target in TEST_TARGETS:  # stored normalised, as the loaders store them
            _place(fields, target, _tests(where, key, data[key], fn_name))
    try:
        return Task(domain=name, **fields)
    except TaskError as e:
        field = domain.row_fields[0][0] if domain.row_fields else "question"
        reason = str(e).split(": ", 1)[-1]
        example = f"; e.g. {EXAMPLE}" if field == "answer" else ""
        raise DataError(f"{where}: field {field!r}: {reason}{example}") from None


def _common_fields(
    where: str, data: Mapping[str, Any], stem: str, number: int, spec: DatasetSpec, label: str
) -> dict:
    question = data.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: field 'question' must be a non-empty string, got {question!r}")
    metadata = data.get("metadata", {})
    if not isinstance(metadata, Mapping):
        raise DataError(f"{where}: field 'metadata' must be a JSON object, got {type(metadata).__name__}")
    task_id = data.get("id", f"{stem}-{number}")
    if not isinstance(task_id, (str, int)) or isinstance(task_id, bool) or not str(task_id):
        raise DataError(f"{where}: field 'id' must be a non-empty string or an integer, got {task_id!r}")
    split = data.get("split", spec.split or "train")
    for key, value in (("split", split), ("source", data.get("source", label))):
        if not isinstance(value, str) or not value:
            raise DataError(f"{where}: field {key!r} must be a non-empty string, got {value!r}")
    return {
        "id": str(task_id), "question": question, "split": split, "source": data.get("source", label),
        "metadata": dict(metadata),
    }  # fmt: skip


def _value(where: str, key: str, value: Any) -> Any:
    """A row's value: an ``answer`` is text (a JSON number is written as text), the rest as given."""
    if key == "answer":
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise DataError(f"{where}: field 'answer' must be a string or a number, got {value!r}")
        return str(value).strip()
    return value


def _place(fields: dict[str, Any], target: str, value: Any) -> None:
    if target.startswith("metadata."):
        fields["metadata"][target.removeprefix("metadata.")] = value
    else:
        fields[target] = value


def _tests(where: str, key: str, tests: Any, fn_name: Any) -> dict[str, Any]:
    try:
        return normalize_tests(tests, fn_name=fn_name if isinstance(fn_name, str) else None).to_dict()
    except TestsFormatError as e:
        raise DataError(f"{where}: field {key!r}: {e}") from None
