"""The structure-sensitive task suite: families of tasks on which the team structure decides the score.

Files (written by ``scripts/make_suite_tasks.py`` with a fixed seed; do not edit by hand; generators and
what each family is for: ``scripts/suite_families.py``):

* ``suite/<family>.jsonl``: one family's tasks (``metadata["family"]``, ``metadata["kind"]``: the generator),
  math families with a plain integer ``answer``, the code family with ``tests`` and
  ``metadata["public_tests"]``;
* ``suite/references.jsonl``: one reference program per task (math: prints the answer; code: solves it),
  kept apart from the tasks so that it can never reach a prompt.

Splits are ``train``, ``val`` and ``test``; ``all`` gives every task of these three. The ``heldout`` split
(``suite/heldout/<family>.jsonl.gz``, references in ``suite/heldout/references.jsonl.gz``) holds test tasks from
sentence templates (code: statement kinds) that no train/val/test task uses, so neither RL training nor the
cold start ever saw them (``HELDOUT_TEMPLATES`` in ``scripts/suite_families.py``); ``all`` leaves it out. As
benchmarks and data sources: ``suite`` (every family) and ``suite_<family>`` (one family), e.g.
``metaagent-eval --benchmarks suite_arith:test`` or ``suite:heldout``.

No code task (any split) is passed by a trivial program (:data:`TRIVIAL_PROGRAMS`: a constant, an echo);
the generator redraws one that would be.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from metaagent.execution.code_tests import normalize_tests, outputs_match

from .bundled import read_generated_jsonl
from .errors import DataError

SUITE_DIR = Path(__file__).with_name("suite")
REFERENCES_FILE = "references.jsonl"
SPLITS = ("train", "val", "test")
HELDOUT = "heldout"  # the held-out-template split, apart from SPLITS (its own folder)
HELDOUT_DIR = SUITE_DIR / HELDOUT
HELDOUT_SUFFIX = ".jsonl.gz"  # the held-out files are gzip-compressed (the tracked tree has a size budget)
SOURCE = "suite"  # the data source of every family; suite_<family> for one

#: the families shipped (one file each), in a fixed order
FAMILIES: tuple[str, ...] = tuple(sorted(p.stem for p in SUITE_DIR.glob("*.jsonl") if p.name != REFERENCES_FILE))


def family_source(family: str) -> str:
    return f"{SOURCE}_{family}"


def _read(path: Path) -> Iterator[dict[str, Any]]:
    return read_generated_jsonl(path, "scripts/make_suite_tasks.py")


def suite_rows(split: str = "all", family: str | None = None) -> Iterator[dict[str, Any]]:
    """Task dicts of the suite for ``split`` (``train``, ``val``, ``test``, ``all`` of these three, or
    ``heldout``), one family or all."""
    if split not in (*SPLITS, "all", HELDOUT):
        raise DataError(f"suite split must be one of {(*SPLITS, HELDOUT)} or 'all', got {split!r}")
    if family is not None and family not in FAMILIES:
        raise DataError(f"unknown suite family {family!r}; families: {', '.join(FAMILIES)}")
    folder, suffix = (HELDOUT_DIR, HELDOUT_SUFFIX) if split == HELDOUT else (SUITE_DIR, ".jsonl")
    for name in (family,) if family else FAMILIES:
        for row in _read(folder / f"{name}{suffix}"):
            if split in ("all", HELDOUT) or row["split"] == split:
                yield row


def suite_references(*, heldout: bool = False) -> dict[str, str]:
    """Reference program per suite task id (for cold-start data of the train split and tests; never prompts);
    ``heldout``: the held-out split's instead."""
    path = HELDOUT_DIR / REFERENCES_FILE.replace(".jsonl", HELDOUT_SUFFIX) if heldout else SUITE_DIR / REFERENCES_FILE
    return {row["id"]: row["solution"] for row in _read(path)}


#: trivial stdin/stdout programs no suite code task may accept: name -> its output from (stdin, the task's
#: first expected output); the constant one stands for every ``print(c)`` (print(0), print(1), print(''), ...),
#: which passes exactly when every expected output matches the first
TRIVIAL_PROGRAMS: dict[str, Callable[[str, str], str]] = {
    "a constant print(c)": lambda stdin, first: first,
    "an echo of stdin": lambda stdin, first: stdin,
    "an echo of the first line": lambda stdin, first: (stdin.splitlines() or [""])[0],
    "an echo of the last line": lambda stdin, first: (stdin.splitlines() or [""])[-1],
}


def trivial_program(tests: Mapping[str, Any]) -> str | None:
    """The name of the first :data:`TRIVIAL_PROGRAMS` entry that passes every one of a code task's stdin/stdout
    ``tests`` (compared as the code runner compares, :func:`outputs_match`), or None when none does."""
    suite = normalize_tests(tests)
    if suite.kind != "stdio":
        raise DataError(f"trivial_program checks stdin/stdout tests, got {suite.kind!r} tests")
    first = suite.cases[0].expected
    for name, output in TRIVIAL_PROGRAMS.items():
        if all(outputs_match(output(case.input, first), case.expected) for case in suite.cases):
            return name
    return None
