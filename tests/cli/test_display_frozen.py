"""The training display with a frozen design: the rollout skips the design stage, so executions start
without ``designs_started`` (this deadlocked on a non-reentrant lock)."""

from __future__ import annotations

import io
import threading

from rich.console import Console

from metaagent.cli.display import TrainDisplay


def test_executions_can_start_without_a_design_stage():
    display = TrainDisplay(Console(file=io.StringIO()))
    worker = threading.Thread(target=display.executions_started, args=(4,), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "executions_started blocked"
    assert display._execs is not None
    display._progress.stop()
