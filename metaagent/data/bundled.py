"""The bundled offline task set: generated math and hand-written code tasks shipped in the package.

Files (written by ``scripts/make_bundled_tasks.py`` with a fixed seed; do not edit by hand):

* ``bundled/math.jsonl``: arithmetic to multi-step word problems; ``metadata["level"]`` 1-5 and
  ``metadata["expression"]``, a Python arithmetic expression whose exact value is the answer.
* ``bundled/code.jsonl``: small original problems, stdin/stdout and call-based;
  ``metadata["level"]`` 1-3 and ``metadata["public_tests"]``.
* ``bundled/code_references.jsonl``: one reference solution per code task, kept apart from the tasks so
  that it can never reach a prompt.

Splits are ``train``, ``val`` and ``test``; ``all`` gives every task.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import DataError
from .tasks import Task

BUNDLED_DIR = Path(__file__).with_name("bundled")
TASK_FILES = ("math.jsonl", "code.jsonl")
REFERENCES_FILE = "code_references.jsonl"
SPLITS = ("train", "val", "test")


def read_generated_jsonl(path: Path, generator: str = "scripts/make_bundled_tasks.py") -> Iterator[dict[str, Any]]:
    """The rows of a JSONL file (``.jsonl.gz``: gzip-compressed) that ``generator`` writes (bundled and suite
    tasks); a missing file says how to regenerate it."""
    if not path.exists():
        raise DataError(f"{path} is missing; regenerate it with {generator}")
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")) as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def bundled_rows(split: str = "all") -> Iterator[dict[str, Any]]:
    """Task dicts of the bundled set for ``split`` (``train``, ``val``, ``test`` or ``all``)."""
    if split not in (*SPLITS, "all"):
        raise DataError(f"bundled split must be one of {SPLITS} or 'all', got {split!r}")
    for name in TASK_FILES:
        for row in read_generated_jsonl(BUNDLED_DIR / name):
            if split == "all" or row["split"] == split:
                yield row


def load_bundled(split: str = "all", domain: str | None = None) -> list[Task]:
    """The bundled tasks of one split, optionally of one domain."""
    return [t for t in map(Task.from_dict, bundled_rows(split)) if domain is None or t.domain == domain]


def code_references() -> dict[str, str]:
    """Reference solution per bundled code task id (for tests and demos, never for prompts)."""
    return {row["id"]: row["solution"] for row in read_generated_jsonl(BUNDLED_DIR / REFERENCES_FILE)}
