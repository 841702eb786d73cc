"""The output directory of a distillation run: append-only JSONL files that survive a kill at any moment.

    designer.jsonl   executor.jsonl   SFT examples (see metaagent.distill.examples)
    trees.jsonl      the full RolloutTree of every finished task (optional; for metaagent-replay)
    done.jsonl       one line per finished task, written *last* for that task: the done-set

A task is committed by appending its examples, then its tree, then its done line, each flushed and
fsync'd. Opening a directory repairs what a kill can leave behind:

1. a torn last line (no trailing newline, or not JSON) is cut off, in every file;
2. lines of tasks that are not in the done-set (their done line was never written) are dropped, so the
   task runs again from scratch instead of being half-counted;

so a resumed run repeats no finished task and loses none. Examples are deduplicated by content hash
(``id``) across the whole directory, including lines written by earlier invocations.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaagent.errors import MetaAgentError

from .examples import DESIGNER, EXECUTOR

EXAMPLE_FILES = {DESIGNER: "designer.jsonl", EXECUTOR: "executor.jsonl"}
TREES_FILE = "trees.jsonl"
DONE_FILE = "done.jsonl"
MANIFEST_FILE = "manifest.json"


class StoreError(MetaAgentError, RuntimeError):
    """The output directory cannot be used; the message names the file and the fix."""


@dataclass
class Repair:
    """What opening the directory had to fix (reported to the user and in the manifest)."""

    torn_lines: dict[str, int] = field(default_factory=dict)  # file -> torn last lines cut
    orphan_lines: dict[str, int] = field(default_factory=dict)  # file -> lines of unfinished tasks dropped

    @property
    def any(self) -> bool:
        return bool(self.torn_lines or self.orphan_lines)


def _fsync_append(f, lines: Iterable[str]) -> None:
    for line in lines:
        f.write(line + "\n")
    f.flush()
    os.fsync(f.fileno())


def _cut_torn_tail(path: Path) -> int:
    """Cut a last line that has no newline or is not JSON; return the number of lines cut (0 or 1)."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    if not data:
        return 0
    if data.endswith(b"\n"):
        body = data[:-1]
        start = body.rfind(b"\n") + 1
        try:
            json.loads(body[start:].decode("utf-8"))
            return 0
        except (UnicodeDecodeError, json.JSONDecodeError):
            keep = start
    else:
        keep = data.rfind(b"\n") + 1
    with open(path, "r+b") as f:
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return 1


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise StoreError(
                    f"{path}:{lineno} is not valid JSON ({e}) and is not the last line, so it is not a torn "
                    "write from an interruption: the file was edited or corrupted; fix or remove that line"
                ) from None
    return rows


def _rewrite(path: Path, rows: list[dict[str, Any]]) -> None:
    """Replace a file's content atomically (temp file + rename)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        _fsync_append(f, (json.dumps(r, ensure_ascii=False) for r in rows))
    os.replace(tmp, path)


@dataclass
class Commit:
    """What :meth:`ExampleStore.commit` wrote: the new examples per kind and kept/duplicate counts."""

    fresh: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


class ExampleStore:
    """Append-only, resumable store of one run's examples (thread-safe :meth:`commit`)."""

    def __init__(self, out: str | os.PathLike[str], *, save_trees: bool = True) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.save_trees = save_trees
        self.repair = Repair()
        self._lock = threading.Lock()
        paths = [self.path(DONE_FILE), *(self.path(n) for n in EXAMPLE_FILES.values()), self.path(TREES_FILE)]
        for p in paths:
            cut = _cut_torn_tail(p)
            if cut:
                self.repair.torn_lines[p.name] = cut
        self.done: dict[str, dict[str, Any]] = {}
        for row in _read_lines(self.path(DONE_FILE)):
            self.done[str(row["task_id"])] = row
        self.seen: dict[str, set[str]] = {k: set() for k in EXAMPLE_FILES}
        for kind, name in EXAMPLE_FILES.items():
            self._drop_orphans(self.path(name), key="task_id", kind=kind)
        self._drop_orphans(self.path(TREES_FILE), key=None, kind=None)
        self._files = {
            kind: open(self.path(name), "a", encoding="utf-8") for kind, name in EXAMPLE_FILES.items()
        }
        self._trees = open(self.path(TREES_FILE), "a", encoding="utf-8") if save_trees else None
        self._done = open(self.path(DONE_FILE), "a", encoding="utf-8")

    def path(self, name: str) -> Path:
        return self.out / name

    def _drop_orphans(self, path: Path, *, key: str | None, kind: str | None) -> None:
        rows = _read_lines(path)
        if not rows:
            return

        def task_of(row: dict[str, Any]) -> str:
            if key is not None:
                return str(row.get(key))
            return str((row.get("task") or {}).get("id"))  # a RolloutTree line

        kept = [r for r in rows if task_of(r) in self.done]
        if len(kept) != len(rows):
            self.repair.orphan_lines[path.name] = len(rows) - len(kept)
            _rewrite(path, kept)
        if kind is not None:
            self.seen[kind].update(str(r.get("id")) for r in kept)

    # ---- writing ------------------------------------------------------------------------------------------

    def is_done(self, task_id: str) -> bool:
        return task_id in self.done

    def commit(
        self,
        task_id: str,
        examples: dict[str, list[dict[str, Any]]],
        summary: dict[str, Any],
        tree_json: str | None = None,
    ) -> Commit:
        """Append a finished task's new (not yet seen) examples, its tree, then its done line."""
        with self._lock:
            if task_id in self.done:
                raise StoreError(
                    f"task {task_id!r} is already committed in {self.out}; task ids must be unique"
                )
            result = Commit()
            for kind in EXAMPLE_FILES:
                fresh, dup = [], 0
                for ex in examples.get(kind, []):
                    if ex["id"] in self.seen[kind]:
                        dup += 1
                        continue
                    self.seen[kind].add(ex["id"])
                    fresh.append(ex)
                _fsync_append(self._files[kind], (json.dumps(ex, ensure_ascii=False) for ex in fresh))
                result.fresh[kind] = fresh
                result.counts[kind], result.counts[f"{kind}_dup"] = len(fresh), dup
            if tree_json is not None and self._trees is not None:
                _fsync_append(self._trees, [tree_json])
            row = {"task_id": task_id, **summary, **{f"kept_{k}": v for k, v in result.counts.items()}}
            _fsync_append(self._done, [json.dumps(row, ensure_ascii=False)])
            self.done[task_id] = row
            return result

    def close(self) -> None:
        with self._lock:
            for f in [*self._files.values(), self._trees, self._done]:
                if f is not None and not f.closed:
                    f.close()

    def __enter__(self) -> ExampleStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- reading ------------------------------------------------------------------------------------------

    def examples(self, kind: str) -> list[dict[str, Any]]:
        """All examples of one kind written so far (by this and earlier invocations)."""
        with self._lock:
            self._files[kind].flush()
            return _read_lines(self.path(EXAMPLE_FILES[kind]))


def read_examples(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The examples of one JSONL file (a torn last line raises: open the run with ExampleStore to repair)."""
    return _read_lines(Path(path))
