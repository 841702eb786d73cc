"""Per-step metrics to ``metrics.jsonl`` (one object per step) and the configured trackers
(TensorBoard, wandb, MLflow: :mod:`metaagent.learn.trackers`)."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from metaagent.learn.trackers import Tracker, open_trackers, scalars


def cuda_peak_mib() -> float | None:
    """Peak CUDA memory torch allocated in this process since the previous call, in MiB (the peak counter is reset),
    or None when this process has not initialised CUDA (CPU runs; the verl backend's driver with vLLM)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    peak = torch.cuda.max_memory_allocated() / 2**20
    torch.cuda.reset_peak_memory_stats()
    return peak


class MetricsLogger:
    """Append-only step metrics. On resume, lines of steps after the resume point are dropped first,
    because the resumed run regenerates them."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        tensorboard: bool = True,
        resume_step: int | None = None,
        loggers: list[str] | tuple[str, ...] | None = None,
        run_id: str | None = None,
        project: str = "metaagent",
        config: Mapping[str, Any] | None = None,
    ):
        """``loggers`` (``trainer.loggers``) names the trackers; None means jsonl plus TensorBoard when
        ``tensorboard``. ``config`` is logged once to trackers that keep it (pass it on a fresh run only)."""
        if loggers is None:
            loggers = ("jsonl", "tensorboard") if tensorboard else ("jsonl",)
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            keep = [line for line in self.path.read_text().splitlines() if _step_of(line) <= resume_step]
            self.path.write_text("".join(line + "\n" for line in keep))
        self._f = open(self.path, "a", encoding="utf-8")
        try:
            self.trackers: list[Tracker] = open_trackers(
                [n for n in loggers if n != "jsonl"], Path(run_dir), run_id=run_id, project=project,
                config=config, resume=resume_step is not None,
            )  # fmt: skip
        except BaseException:
            self._f.close()
            raise

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        clean = {k: _jsonable(v) for k, v in metrics.items()}
        self._f.write(json.dumps({"step": step, **clean}, sort_keys=True) + "\n")
        self._f.flush()
        if self.trackers:
            numeric = scalars(clean)
            for t in self.trackers:
                t.log(step, numeric)

    def log_samples(self, step: int, samples: Mapping[str, str]) -> None:
        """A designer script and an agent reply of the step, to the trackers that keep text."""
        if samples:
            for t in self.trackers:
                t.log_samples(step, samples)

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()
        trackers, self.trackers = self.trackers, []
        for t in trackers:
            t.close()


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
