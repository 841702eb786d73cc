"""`metaagent-eval`: methods x benchmarks x models, with the paper's metrics, tables and analyses.

    metaagent-eval --model embedded --methods sa fixed:single_math auto --benchmarks bundled:test --n 3
    metaagent-eval --model embedded embedded-sft --benchmarks bundled:test humaneval --limit 40 --out results/
    metaagent-eval --designer-model embedded-sft --executor-model runs/rl --methods auto
    metaagent-eval --grid-designers embedded-sft runs/rl/checkpoints/step_00000030 \\
                   --grid-executors embedded-sft runs/rl/checkpoints/step_00000030 --methods auto
    metaagent-eval --backend openai --base-url http://127.0.0.1:8000/v1 --model my-served-model

Results land in --out: records per task (open them with `metaagent-replay OUT --task ID`), results.json,
table.md (Table 1 layout) and report.html. Re-running the same command resumes: finished tasks are kept.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from metaagent.cli.flags import Parser, add_config_flags, add_debug_flag, load_flat_config, run_main
from metaagent.interrupts import StopSignalScope

PROG = "metaagent-eval"


def build_parser() -> argparse.ArgumentParser:
    from metaagent.eval.config import EvalConfig

    p = Parser(
        prog=PROG,
        description="Evaluate single-agent, fixed and automatic multi-agent systems on benchmarks.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("--config", "-c", help="YAML file of EvalConfig fields (flags override it)")
    p.add_argument("--greedy", action="store_true", help="temperature 0 for both roles (deterministic samples)")
    add_debug_flag(p)
    add_config_flags(p, EvalConfig, aliases={"--model": "models"}, title="EvalConfig fields")
    return p


def config_from_args(args: argparse.Namespace):
    from metaagent.eval.config import EvalConfig

    return load_flat_config(EvalConfig, args.config, args, temperature=0.0 if args.greedy else None)


class RichProgress:
    """The eval observer as a rich progress bar: tasks done over all (cell, benchmark, method) parts."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
        )
        self._task = None
        self._lock = threading.Lock()
        self.running: dict[int, str] = {}  # thread -> the part label of its task (a thread runs one task)
        self.finished = 0  # tasks finished in this run

    def start(self, total: int, done: int) -> None:
        self.progress.start()
        self._task = self.progress.add_task("eval", total=total, completed=done)

    def part(self, label: str, todo: int) -> None:
        with self._lock:
            self.running[threading.get_ident()] = label
        self.progress.update(self._task, description=label)

    def task_done(self, tree: Any) -> None:
        with self._lock:
            self.running.pop(threading.get_ident(), None)
            self.finished += 1
            self.progress.advance(self._task)

    def in_flight(self) -> str:
        """The tasks running now, by part: ``2 tasks (m | bench | auto: 2)``."""
        with self._lock:
            labels = list(self.running.values())
        parts = ", ".join(f"{label}: {labels.count(label)}" for label in dict.fromkeys(labels))
        return f"{len(labels)} task{'s' * (len(labels) != 1)}" + (f" ({parts})" if parts else "")

    def finish(self) -> None:
        self.progress.stop()


class Stopper(StopSignalScope):
    """SIGINT / SIGTERM during an evaluation. The first says at once what is finishing, and stops the queue:
    the tasks in flight finish and are recorded, none starts. The second stops now: records finished so far
    stay (each is fsynced as it is written), the tasks in flight run again when the same command is rerun.
    Exit code 128 + the signal's number (130 for Ctrl-C)."""

    def __init__(self, progress: RichProgress, out: Any, exit_now: Callable[[int], None] = os._exit) -> None:
        self.progress, self.out, self.exit_now = progress, out, exit_now
        self.signum: int | None = None

    def _say(self, text: str) -> None:
        self.progress.console.print(f"{PROG}: {text}", highlight=False, markup=False, soft_wrap=True)

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum = signum
            self._say(
                f"{name}: finishing the {self.progress.in_flight()} in flight, starting no more; finished "
                f"records are kept in {self.out} (rerun the command to resume). Send it again to stop now"
            )
            raise KeyboardInterrupt
        self._say(
            f"{name}: stopped now; the {self.progress.finished} tasks finished in this run are recorded in "
            f"{self.out}, the {self.progress.in_flight()} in flight run again when you rerun the command"
        )
        sys.stdout.flush()
        sys.stderr.flush()
        self.exit_now(128 + self.signum)  # the threads in flight cannot be stopped: the process ends


def main(argv: list[str] | None = None) -> None:
    code = run_main(PROG, _main, argv)
    if code:
        sys.exit(code)


def _main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from metaagent.eval.runner import RESULTS_FILE, TABLE_FILE, Evaluation

    config = config_from_args(args)
    progress = RichProgress()
    stopper = Stopper(progress, config.out)
    try:
        with stopper:
            evaluation = Evaluation(config, observer=progress)
            results = evaluation.run()
    except KeyboardInterrupt:
        print(
            f"{PROG}: interrupted; finished tasks are kept in {config.out}: run again to resume",
            file=sys.stderr,
        )
        sys.exit(128 + (stopper.signum or signal.SIGINT))
    print((evaluation.out / TABLE_FILE).read_text())
    print(f"results: {evaluation.out / RESULTS_FILE}" + ("" if results["complete"] else " (partial)"))


if __name__ == "__main__":
    main()
