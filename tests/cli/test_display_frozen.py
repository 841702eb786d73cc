"""The training display with frozen designs: executions start without a designs phase (it used to deadlock)."""

from __future__ import annotations

import threading

from rich.console import Console

from metaagent.cli.display import TrainDisplay


def test_executions_started_without_designs_started_does_not_deadlock():
    display = TrainDisplay(Console(file=open("/dev/null", "w")), show_samples=False)
    done = threading.Event()

    def run() -> None:
        display.executions_started(4)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(10), "executions_started blocked on the display's own lock"
    display._progress.stop()
