"""Rich progress display of a distillation run: tasks, acceptance rate, examples kept, tokens spent."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from .runner import DistillObserver, RunTotals, TaskResult


def _stats(t: RunTotals) -> str:
    rate = f"{t.acceptance:.0%}" if t.acceptance is not None else "-"
    failed = f"  [red]{t.tasks_failed} failed[/red]" if t.tasks_failed else ""
    return (
        f"accept {rate} ({t.correct}/{t.scored} exec)  kept {t.designer} designer / {t.executor} executor"
        f"  tokens {t.tokens:,}{failed}"
    )


class DistillProgress(DistillObserver):
    """A progress bar over this invocation's tasks, with whole-directory totals next to it."""

    def __init__(self, console: Console | None = None, *, verbose: bool = False) -> None:
        self.console = console or Console(stderr=True)
        self.verbose = verbose
        self.progress: Progress | None = None
        self.task = None

    def started(self, totals: RunTotals, pending: int) -> None:
        if totals.tasks_done:
            self.console.print(
                f"resuming: {totals.tasks_done} of {totals.tasks_total} tasks already done "
                f"({totals.designer} designer / {totals.executor} executor examples kept)"
            )
        self.progress = Progress(
            TextColumn("distill"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
        )
        self.progress.start()
        self.task = self.progress.add_task("tasks", total=pending, stats=_stats(totals))

    def task_done(self, result: TaskResult, totals: RunTotals) -> None:
        if self.progress is None:
            return
        if self.verbose:
            s = result.summary
            self.progress.console.print(
                f"  {result.task_id}: {s['correct']}/{s['scored']} correct, kept "
                f"{result.kept.get('designer', 0)} designer / {result.kept.get('executor', 0)} executor"
            )
        self.progress.update(self.task, advance=1, stats=_stats(totals))

    def task_failed(self, task_id: str, error: BaseException, totals: RunTotals) -> None:
        if self.progress is None:
            return
        self.progress.console.print(f"  [red]{task_id} failed[/red] (will be retried on resume): {error}")
        self.progress.update(self.task, advance=1, stats=_stats(totals))

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
