"""Load the records of a run (a run directory, or any list of rollout JSONL files) into a :class:`Run`.

A run directory, as the trainer, evaluation and serving write it::

    RUN/config.yaml                       resolved TrainConfig
    RUN/run.json                          run id, seed, models, metaagent version, ...
    RUN/metrics.jsonl                     one JSON object per step
    RUN/rollouts/step_000000.jsonl        RolloutTree per line (train rollouts of that step)
    RUN/rollouts/val_step_000010.jsonl    validation rollouts

Record files may be compressed (``*.jsonl.xz``, ``*.jsonl.gz``: committed results); they read the same.

Nothing here is fatal for a bad line: a truncated last line (a run still writing), a corrupt line, a line
of a newer schema version, or a record whose fields have the wrong types is skipped and reported as a
:class:`~metaagent.records.BadLine` (file, line, reason). Records of older schema versions are
migrated by :func:`metaagent.records.migrate`, which also says which version a reader needs.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from metaagent.learn.metrics import read_metrics
from metaagent.records import (
    RECORD_SUFFIX,
    AgentTurn,
    BadLine,
    CheckReport,
    Design,
    Execution,
    RewardRecord,
    RolloutTree,
    SchemaError,
    ToolCall,
    glob_records,
    read_record_lines,
    record_stem,
)
from metaagent.rollout.metrics import rollout_metrics

from .errors import ReplayError

ROLLOUTS_DIR = "rollouts"
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.yaml"
INFO_FILE = "run.json"
#: record files whose name starts with this hold validation rollouts (their kind is "val")
VAL_PREFIX = "val_"
#: files under a directory without ``rollouts/`` that are never rollout records
NOT_RECORDS = (METRICS_FILE,)
#: the step in a record file's name (without its suffix)
STEP_FILE_RE = re.compile(r"(?:^|_)step_(\d+)$")

PathLike = str | os.PathLike[str]


def benchmark_of(task: Mapping[str, Any]) -> str:
    """The benchmark a task belongs to: its ``source`` (e.g. ``aime2025``), else its domain."""
    return str(task.get("source") or task.get("domain") or "?")


@dataclass(frozen=True, eq=False)
class TreeRef:
    """One rollout tree and where it was read from.

    ``kind`` is ``"val"`` for trees of ``val_*.jsonl`` files, else the tree's ``mode``
    (train, eval, fixed, serve, distill).
    """

    tree: RolloutTree
    file: str
    line: int
    kind: str

    @property
    def task_id(self) -> str:
        return self.tree.task_id

    @property
    def step(self) -> int | None:
        return self.tree.step

    @property
    def benchmark(self) -> str:
        return benchmark_of(self.tree.task)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _step_key(step: int | None) -> int:
    return -1 if step is None else step


@dataclass
class Run:
    """The records of one run (or of the files given), its metrics and what could not be read.

    Attributes:
        name: the run id (``run.json``, else the most common ``run_id`` of the trees, else the path).
        root: the run directory, None when only record files were given.
        files: the record files read, in order.
        refs: every readable tree with its file, line and kind.
        bad_lines: skipped lines of record and metrics files, each with the reason.
        metrics: rows of ``metrics.jsonl`` sorted by step (rows of one step merged: the trainer logs
            validation as a second row), or computed from the records when the run has no metrics file
            (then ``metrics_source == "records"`` and there are no schedule keys).
        config: ``config.yaml`` as a dict (None when absent or unreadable).
        info: ``run.json`` as a dict (None when absent or unreadable).
        notes: other non-fatal problems (an unreadable ``config.yaml`` or ``run.json``).
    """

    name: str
    root: Path | None
    files: list[Path]
    refs: list[TreeRef]
    bad_lines: list[BadLine] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    metrics_source: str | None = None
    config: dict[str, Any] | None = None
    info: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def trees(self) -> list[RolloutTree]:
        return [r.tree for r in self.refs]

    def task_ids(self) -> list[str]:
        """Task ids in order of first appearance."""
        return list(dict.fromkeys(r.task_id for r in self.refs))

    def steps(self) -> list[int | None]:
        return sorted({r.step for r in self.refs}, key=_step_key)

    def kinds(self) -> list[str]:
        return sorted({r.kind for r in self.refs})

    def view(self, *, kind: str | None = None, step: int | None = None) -> Run:
        """The same run restricted to trees of one kind and/or step (metrics and problems are kept)."""
        if kind is not None and kind not in self.kinds():
            raise ReplayError(f"{self.name} has no records of kind {kind!r}; it has {self.kinds()}")
        refs = [r for r in self.refs if (kind is None or r.kind == kind) and (step is None or r.step == step)]
        if step is not None and not refs:
            raise ReplayError(f"{self.name} has no records at step {step}; steps: {_fmt_steps(self.steps())}")
        return Run(
            self.name,
            self.root,
            self.files,
            refs,
            self.bad_lines,
            self.metrics,
            self.metrics_source,
            self.config,
            self.info,
            self.notes,
        )

    def select(
        self,
        task: str | None = None,
        *,
        step: int | None = None,
        kind: str | None = None,
        latest: bool = True,
    ) -> list[TreeRef]:
        """Trees of a task (all tasks when None), optionally of one step and kind.

        Without ``step`` and with ``latest``, only the trees of the latest step at which the task appears.
        Raises :class:`ReplayError` naming what exists when nothing matches.
        """
        refs = self.refs
        if task is not None:
            refs = [r for r in refs if r.task_id == task]
            if not refs:
                ids = self.task_ids()
                hint = f"e.g. {', '.join(ids[:5])}" if ids else "the run has no readable records"
                raise ReplayError(
                    f"task {task!r} is not in {self.name} ({len(ids)} tasks; {hint}); "
                    "run without --task to list them"
                )
        if kind is not None:
            kinds = sorted({r.kind for r in refs})
            refs = [r for r in refs if r.kind == kind]
            if not refs:
                raise ReplayError(f"no records of kind {kind!r}{_for(task)} in {self.name}; kinds: {kinds}")
        if step is not None:
            steps = sorted({r.step for r in refs}, key=_step_key)
            refs = [r for r in refs if r.step == step]
            if not refs:
                raise ReplayError(
                    f"no records at step {step}{_for(task)} in {self.name}; steps: {_fmt_steps(steps)}"
                )
        elif latest and refs:
            last = max(_step_key(r.step) for r in refs)
            refs = [r for r in refs if _step_key(r.step) == last]
        return refs

    def task(self, task_id: str) -> dict[str, Any]:
        """The task record of ``task_id`` (from its latest tree)."""
        return self.select(task_id)[-1].tree.task


def _for(task: str | None) -> str:
    return f" for task {task!r}" if task is not None else ""


def _fmt_steps(steps: Iterable[int | None]) -> str:
    return ", ".join("none" if s is None else str(s) for s in steps) or "none"


# ---- reading ----------------------------------------------------------------------------------------------


def _check_tree(tree: RolloutTree) -> None:
    """Type checks the replay tool relies on (from_dict builds nested records but does not check types)."""

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise SchemaError(f"malformed record: {what}")

    need(
        isinstance(tree.task, dict) and tree.task.get("id") not in (None, ""),
        "task must be an object with an id",
    )
    need(isinstance(tree.config, dict) and isinstance(tree.models, dict), "config and models must be objects")
    need(
        tree.step is None or (isinstance(tree.step, int) and not isinstance(tree.step, bool)),
        "step must be an integer",
    )
    need(isinstance(tree.designs, list), "designs must be a list")
    for d in tree.designs:
        need(isinstance(d, Design) and isinstance(d.check, CheckReport), "each design needs a check report")
        need(
            d.structure is None or isinstance(d.structure, dict),
            f"design {d.index}: structure must be an object",
        )
        need(isinstance(d.executions, list), f"design {d.index}: executions must be a list")
        for e in d.executions:
            need(isinstance(e, Execution), f"design {d.index}: executions must be objects")
            need(
                isinstance(e.turns, list) and all(isinstance(t, AgentTurn) for t in e.turns),
                f"design {d.index} execution {e.index}: turns must be a list of objects",
            )
            need(
                all(isinstance(t.messages, list) for t in e.turns),
                f"design {d.index} execution {e.index}: turn messages must be lists",
            )
            need(
                isinstance(e.tool_calls, list) and all(isinstance(c, ToolCall) for c in e.tool_calls),
                f"design {d.index} execution {e.index}: tool_calls must be a list of objects",
            )
            need(
                e.reward is None or isinstance(e.reward, RewardRecord),
                f"design {d.index} execution {e.index}: reward must be an object",
            )


def read_records(path: PathLike) -> tuple[list[TreeRef], list[BadLine]]:
    """Trees of one JSONL file with their line numbers, and the lines that could not be read.

    A last line without a newline that does not parse is reported as incomplete (a run still writing, or
    a cut file), not as corruption.
    """
    path = Path(path)
    refs: list[TreeRef] = []
    bad: list[BadLine] = []
    val = path.name.startswith(VAL_PREFIX)
    try:
        lines, cut = read_record_lines(path)
    except OSError as e:
        return [], [BadLine(str(path), 0, f"cannot read the file: {e}")]
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            tree = RolloutTree.from_json(line)
            _check_tree(tree)
        except (SchemaError, TypeError, ValueError, AttributeError) as e:
            reason = str(e)
            if lineno == len(lines) and not line.endswith("\n"):
                reason = f"incomplete last line (the file is still being written, or was cut): {reason}"
            bad.append(BadLine(str(path), lineno, reason))
            continue
        refs.append(TreeRef(tree, str(path), lineno, "val" if val else tree.mode))
    if cut:
        bad.append(BadLine(str(path), len(lines) + 1, cut))
    return refs, bad


def record_files(directory: PathLike) -> list[Path]:
    """The rollout record files of a directory: ``rollouts/**/*.jsonl`` (or ``.jsonl.xz`` / ``.jsonl.gz``) of a
    run directory, else every such file below it except metrics files."""
    directory = Path(directory)
    rollouts = directory / ROLLOUTS_DIR
    root = rollouts if rollouts.is_dir() else directory
    return [p for p in glob_records(root, f"**/*{RECORD_SUFFIX}") if p.name not in NOT_RECORDS]


def _read_yaml(path: Path, notes: list[str]) -> dict[str, Any] | None:
    if not path.is_file():
        return None

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        notes.append(f"{path}: not readable as YAML ({e}); the report shows no resolved config")
        return None
    if not isinstance(data, dict):
        notes.append(f"{path}: expected a mapping at the top level")
        return None
    return data


def _read_json(path: Path, notes: list[str]) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        notes.append(f"{path}: not readable as JSON ({e})")
        return None
    if not isinstance(data, dict):
        notes.append(f"{path}: expected a JSON object")
        return None
    return data


def _read_metrics(path: Path, bad: list[BadLine]) -> list[dict[str, Any]]:
    rows, bad_numbers = read_metrics(path)
    bad.extend(BadLine(str(path), n, "metrics line is not valid JSON") for n in bad_numbers)
    merged: dict[int, dict[str, Any]] = {}  # the trainer logs validation metrics as a second row of a step
    for row in rows:
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            merged.setdefault(row["step"], {}).update(row)
        else:
            bad.append(BadLine(str(path), 0, f"metrics row without an integer 'step': {str(row)[:80]}"))
    return [merged[s] for s in sorted(merged)]


def metrics_from_records(refs: Sequence[TreeRef]) -> list[dict[str, Any]]:
    """``rollout/...`` metrics per step computed from the trees (for runs without ``metrics.jsonl``);
    validation trees are left out, as the trainer logs them under ``val/``."""
    by_step: dict[int, list[RolloutTree]] = {}
    for r in refs:
        if r.step is not None and r.kind != "val":
            by_step.setdefault(r.step, []).append(r.tree)
    return [{"step": s, **rollout_metrics(trees)} for s, trees in sorted(by_step.items())]


def file_step(path: PathLike) -> int | None:
    """The step a record file's name gives (``step_000012.jsonl``, ``val_step_000012.jsonl``), else None."""
    m = STEP_FILE_RE.search(record_stem(path))
    return int(m.group(1)) if m else None


def load_run(source: PathLike | Sequence[PathLike] | Run, *, steps: Collection[int] | None = None) -> Run:
    """Read a run directory, one record file, or a list of record files and directories.

    ``steps`` skips the record files of other steps without reading them (files whose name gives no step
    are always read): for one step of a long run. Raises :class:`ReplayError` when a path does not exist or
    holds no record files. Unreadable lines are never fatal: they are in ``run.bad_lines``.
    """
    if isinstance(source, Run):
        return source
    paths = [Path(source)] if isinstance(source, (str, os.PathLike)) else [Path(p) for p in source]
    if not paths:
        raise ReplayError("no input: give a run directory or rollout record files (*.jsonl)")
    files: list[Path] = []
    root: Path | None = None
    for p in paths:
        if not p.exists():
            raise ReplayError(f"{p} does not exist; give a run directory or rollout record files (*.jsonl)")
        if p.is_dir():
            found = record_files(p)
            if not found:
                raise ReplayError(
                    f"{p} holds no rollout record files; expected {p}/{ROLLOUTS_DIR}/step_*.jsonl "
                    f"(a run directory) or *{RECORD_SUFFIX} files"
                )
            files.extend(found)
            root = root or p
        else:
            files.append(p)
    files = list(dict.fromkeys(files))
    if steps is not None:
        wanted = set(steps)
        files = [f for f in files if file_step(f) is None or file_step(f) in wanted]

    refs: list[TreeRef] = []
    bad: list[BadLine] = []
    for f in files:
        r, b = read_records(f)
        refs.extend(r)
        bad.extend(b)

    notes: list[str] = []
    config = info = None
    metrics: list[dict[str, Any]] = []
    metrics_source = None
    if root is not None:
        config = _read_yaml(root / CONFIG_FILE, notes)
        info = _read_json(root / INFO_FILE, notes)
        if (root / METRICS_FILE).is_file():
            metrics = _read_metrics(root / METRICS_FILE, bad)
            metrics_source = METRICS_FILE
    if not metrics:
        metrics = metrics_from_records(refs)
        metrics_source = "records" if metrics else None

    name = str((info or {}).get("run_id") or "")
    if not name and refs:
        name = Counter(r.tree.run_id for r in refs).most_common(1)[0][0]
    name = name or str(root or (files or paths)[0])  # files: empty when --step matches no file name
    return Run(name, root, files, refs, bad, metrics, metrics_source, config, info, notes)
