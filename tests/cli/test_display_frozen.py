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


def test_later_waves_of_the_adaptive_budget_grow_one_executions_bar():
    display = TrainDisplay(Console(file=io.StringIO()))
    display.designs_started(2)
    display.executions_started(4)
    display.executions_started(3)  # a second wave of the same rollout
    bars = [t for t in display._progress.tasks if t.description == "executions"]
    assert len(bars) == 1 and bars[0].total == 7
    display.designs_started(2)  # the next rollout starts a fresh bar
    display.executions_started(5)
    assert [t.total for t in display._progress.tasks if t.description == "executions"] == [5]
    display._progress.stop()
