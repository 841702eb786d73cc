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
import sys
import threading
from typing import Any

from metaagent.errors import MetaAgentError

PROG = "metaagent-eval"

#: flag -> EvalConfig field, for the flags whose name differs from the field
RENAMED = {"model": "models"}


def build_parser() -> argparse.ArgumentParser:
    from metaagent.eval.config import EvalConfig

    p = argparse.ArgumentParser(
        prog=PROG,
        description="Evaluate single-agent, fixed and automatic multi-agent systems on benchmarks.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    fields = EvalConfig.model_fields
    for name, f in fields.items():
        flag = "--" + ("model" if name == "models" else name).replace("_", "-")
        help_ = f"{f.description} (default: {f.get_default(call_default_factory=True)})".replace("%", "%%")
        annotation = str(f.annotation)
        if annotation.startswith("list["):
            item = int if "int" in annotation else str
            p.add_argument(flag, dest=name, nargs="+", type=item, default=None, help=help_)
        elif f.annotation is bool:
            p.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_)
        else:
            kind = int if f.annotation in (int, int | None) else float if f.annotation is float else str
            p.add_argument(flag, dest=name, type=kind, default=None, help=help_)
    p.add_argument("--greedy", action="store_true", help="temperature 0 for both roles (deterministic samples)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def config_from_args(args: argparse.Namespace):
    from metaagent.eval.config import EvalConfig, make_config

    values: dict[str, Any] = {k: v for k, v in vars(args).items() if k in EvalConfig.model_fields and v is not None}
    if args.greedy:
        values["temperature"] = 0.0
    return make_config(**values)


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

    def start(self, total: int, done: int) -> None:
        self.progress.start()
        self._task = self.progress.add_task("eval", total=total, completed=done)

    def part(self, label: str, todo: int) -> None:
        self.progress.update(self._task, description=label)

    def task_done(self, tree: Any) -> None:
        with self._lock:
            self.progress.advance(self._task)

    def finish(self) -> None:
        self.progress.stop()


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        from metaagent.eval.runner import RESULTS_FILE, TABLE_FILE, Evaluation

        config = config_from_args(args)
        evaluation = Evaluation(config, observer=RichProgress())
        results = evaluation.run()
    except MetaAgentError as e:
        if args.debug:
            raise
        sys.exit(f"{PROG}: {e}")
    except KeyboardInterrupt:
        sys.exit(f"{PROG}: interrupted; finished tasks are kept in {args.out or 'the results dir'}: run again to resume")
    print((evaluation.out / TABLE_FILE).read_text())
    print(f"results: {evaluation.out / RESULTS_FILE}" + ("" if results["complete"] else " (partial)"))


if __name__ == "__main__":
    main()
