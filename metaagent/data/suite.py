"""The structure-sensitive task suite: families of tasks on which the team structure decides the score.

Files (written by ``scripts/make_suite_tasks.py`` with a fixed seed; do not edit by hand; generators and
what each family is for: ``scripts/suite_families.py``):

* ``suite/<family>.jsonl``: one family's tasks (``metadata["family"]``, ``metadata["kind"]``: the generator),
  math families with a plain integer ``answer``, the code family with ``tests`` and
  ``metadata["public_tests"]``;
* ``suite/references.jsonl``: one reference program per task (math: prints the answer; code: solves it),
  kept apart from the tasks so that it can never reach a prompt.

Splits are ``train``, ``val`` and ``test``; ``all`` gives every task. As benchmarks and data sources:
``suite`` (every family) and ``suite_<family>`` (one family), e.g. ``metaagent-eval --benchmarks
suite_arith:test``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .bundled import read_generated_jsonl
from .errors import DataError

SUITE_DIR = Path(__file__).with_name("suite")
REFERENCES_FILE = "references.jsonl"
SPLITS = ("train", "val", "test")
SOURCE = "suite"  # the data source of every family; suite_<family> for one

#: the families shipped (one file each), in a fixed order
FAMILIES: tuple[str, ...] = tuple(sorted(p.stem for p in SUITE_DIR.glob("*.jsonl") if p.name != REFERENCES_FILE))


def family_source(family: str) -> str:
    return f"{SOURCE}_{family}"


def _read(path: Path) -> Iterator[dict[str, Any]]:
    return read_generated_jsonl(path, "scripts/make_suite_tasks.py")


def suite_rows(split: str = "all", family: str | None = None) -> Iterator[dict[str, Any]]:
    """Task dicts of the suite for ``split`` (``train``, ``val``, ``test`` or ``all``), one family or all."""
    if split not in (*SPLITS, "all"):
        raise DataError(f"suite split must be one of {SPLITS} or 'all', got {split!r}")
    if family is not None and family not in FAMILIES:
        raise DataError(f"unknown suite family {family!r}; families: {', '.join(FAMILIES)}")
    for name in (family,) if family else FAMILIES:
        for row in _read(SUITE_DIR / f"{name}.jsonl"):
            if split == "all" or row["split"] == split:
                yield row


def suite_references() -> dict[str, str]:
    """Reference program per suite task id (for cold-start data of the train split and tests; never prompts)."""
    return {row["id"]: row["solution"] for row in _read(SUITE_DIR / REFERENCES_FILE)}
