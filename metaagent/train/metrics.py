"""Per-step metrics to ``metrics.jsonl`` (one object per step) and optionally TensorBoard."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class MetricsLogger:
    """Append-only step metrics. On resume, lines of steps after the resume point are dropped first,
    because the resumed run regenerates them."""

    def __init__(self, run_dir: str | os.PathLike[str], *, tensorboard: bool = True, resume_step: int | None = None):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            keep = [line for line in self.path.read_text().splitlines() if _step_of(line) <= resume_step]
            self.path.write_text("".join(line + "\n" for line in keep))
        self._f = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        clean = {k: _jsonable(v) for k, v in metrics.items()}
        self._f.write(json.dumps({"step": step, **clean}, sort_keys=True) + "\n")
        self._f.flush()
        if self._tb is not None:
            for k, v in clean.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def _jsonable(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def _step_of(line: str) -> float:
    try:
        return json.loads(line).get("step", math.inf)
    except json.JSONDecodeError:
        return math.inf  # a torn last line from a crash is dropped on resume


def read_metrics(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], list[int]]:
    """Rows of a metrics file and the line numbers that could not be parsed."""
    rows, bad = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                bad.append(i)
    return rows, bad
