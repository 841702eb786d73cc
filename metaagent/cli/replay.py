"""`metaagent-replay`: replay and analyse recorded rollouts (a thin layer over :mod:`metaagent.replay`).

    metaagent-replay RUN                                  steps and tasks available
    metaagent-replay RUN --task ID [--step S] [--design i] [--execution j] [--full]
    metaagent-replay RUN --stats [--json]
    metaagent-replay RUN_A --compare RUN_B [--task ID] [--level pattern]
    metaagent-replay RUN --html report.html [--compare RUN_B]
    metaagent-replay RUN --task ID --rerun --model tiny [--design i] [--execution j]
    metaagent-replay RUN --task ID --control [--rerun --model tiny --execution j]

RUN is a run directory (all ``rollouts/**/*.jsonl``) or one or more rollout record files. Unreadable lines
(a run still writing, corrupt or newer-schema lines) are listed on stderr and skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, is_dataclass
from typing import Any

from metaagent.cli.flags import Parser, add_debug_flag, run_main

EXIT_OK, EXIT_NO_RECORDS, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="metaagent-replay",
        description="Replay and analyse recorded rollouts: designs, agent turns, statistics, comparisons.",
    )
    p.add_argument(
        "paths", nargs="+", metavar="RUN", help="a run directory, or rollout record files (*.jsonl)"
    )
    sel = p.add_argument_group("selection")
    sel.add_argument("--task", metavar="ID", help="replay this task (without: list the tasks and steps)")
    sel.add_argument(
        "--step",
        type=int,
        metavar="S",
        help="the step to show (default: the task's latest); with --compare: of run A",
    )
    sel.add_argument("--design", type=int, metavar="I", help="only this design (index)")
    sel.add_argument("--execution", type=int, metavar="J", help="only this execution (index) of each design")
    sel.add_argument(
        "--control",
        action="store_true",
        help="the task's budget-matched single-agent control (algo.designer_baseline: control) instead of its "
        "designs; with --rerun: re-execute the control's execution --execution",
    )
    sel.add_argument(
        "--kind", metavar="K", help="only records of this kind: train, val, eval, fixed, serve, ..."
    )
    sel.add_argument("--full", action="store_true", help="show long texts in full instead of folded")
    ana = p.add_argument_group("analysis")
    ana.add_argument(
        "--stats", action="store_true", help="structure shares, role names, prompt diversity, validity"
    )
    ana.add_argument(
        "--compare",
        action="append",
        metavar="RUN_B",
        help="compare with another run B (repeat for several record files of B)",
    )
    ana.add_argument(
        "--step-b", type=int, metavar="S", help="with --compare: the step of run B (default: latest)"
    )
    ana.add_argument(
        "--level",
        default="pattern",
        choices=("family", "structure", "pattern"),
        help="with --compare: the structure label that decides 'same structure' (default: pattern)",
    )
    ana.add_argument(
        "--threshold", type=float, default=0.5, help="with --compare: solve rate that counts as solved"
    )
    ana.add_argument("--html", metavar="OUT", help="write a self-contained HTML report")
    ana.add_argument(
        "--html-tasks", type=int, default=50, metavar="N", help="task replays in the HTML report"
    )
    ana.add_argument(
        "--json", action="store_true", help="print --stats / --compare / --rerun / --task as JSON"
    )
    rer = p.add_argument_group("re-run")
    rer.add_argument("--rerun", action="store_true", help="re-execute the recorded design with --model")
    rer.add_argument("--model", help="alias (tiny, embedded), HF folder, checkpoint or run directory")
    rer.add_argument("--backend", default="hf", help="policy backend for --model (default: hf)")
    rer.add_argument("--model-key", help="which model of a checkpoint with several (default: executor)")
    rer.add_argument("--temperature", type=float, help="override the recorded executor temperature")
    p.add_argument("--width", type=int, help="console width (default: the terminal's, 160 when piped)")
    return p


def _check_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    if a.rerun and (not a.task or not a.model):
        p.error("--rerun needs --task ID and --model M (e.g. --model tiny)")
    if a.model and not a.rerun:
        p.error("--model is only used with --rerun")
    if a.rerun and a.compare:
        p.error("--rerun and --compare cannot be combined")
    if a.control and not a.task:
        p.error("--control needs --task ID")
    if a.control and a.design is not None:
        p.error("--control shows the control, not a design: drop --design")
    if a.html_tasks < 1:
        p.error("--html-tasks must be >= 1")
    if not 0 < a.threshold <= 1:
        p.error("--threshold must be in (0, 1]")


def _dump(data: Any) -> None:
    def default(obj: Any) -> Any:
        return asdict(obj) if is_dataclass(obj) else str(obj)

    print(json.dumps(data, indent=2, ensure_ascii=False, default=default))


def main(argv: list[str] | None = None) -> None:
    sys.exit(run_main("metaagent-replay", _main, argv))


def _main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    _check_args(parser, args)
    try:
        code = run(args)
    except BrokenPipeError:  # the output was piped into e.g. `head`, which stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_OK
    return code


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from metaagent.replay import ReplayError, load_run
    from metaagent.replay import console as show

    out = Console(width=args.width or (None if sys.stdout.isatty() else 160), highlight=False)
    err = Console(stderr=True, width=args.width or (None if sys.stderr.isatty() else 160), highlight=False)
    try:
        # one step of one task: read only that step's record files (long runs hold many)
        only_step = args.task and args.step is not None and not (args.compare or args.stats or args.html)
        run_a = load_run(args.paths, steps=[args.step] if only_step else None)
        if only_step and args.task not in run_a.task_ids():
            run_a = load_run(args.paths)  # all of it, so that the error names the steps the task has
        show.print_problems(run_a, err)
        if not run_a.refs:
            err.print(f"no readable rollout records in {', '.join(args.paths)}", style="bold red")
            return EXIT_NO_RECORDS
        if args.kind:
            run_a = run_a.view(kind=args.kind)
        run_b = None
        if args.compare:
            run_b = load_run(args.compare)
            show.print_problems(run_b, err)
            if args.kind:
                run_b = run_b.view(kind=args.kind)
        return _act(args, run_a, run_b, out, err)
    except ReplayError as e:
        err.print(f"metaagent-replay: {e}", style="bold red", markup=False, soft_wrap=True)
        return EXIT_USAGE


def _act(args: argparse.Namespace, run_a: Any, run_b: Any, out: Any, err: Any) -> int:
    from metaagent.replay import compare, rerun, stats
    from metaagent.replay import console as show

    if args.rerun:
        overrides = {"temperature": args.temperature} if args.temperature is not None else None
        res = rerun(
            run_a,
            args.task,
            args.model,
            design=args.design or 0,
            execution=args.execution or 0,
            step=args.step,
            kind=args.kind,
            backend=args.backend,
            model_key=args.model_key,
            sampling=overrides,
            control=args.control,
        )
        _dump(res.to_dict()) if args.json else show.print_rerun(res, out, args.full)
        return EXIT_OK
    cmp = None
    if run_b is not None:
        cmp = compare(
            run_a,
            run_b,
            level=args.level,
            threshold=args.threshold,
            kind=args.kind,
            step_a=args.step,
            step_b=args.step_b,
        )
    if args.html:  # the report holds the statistics, the comparison and the task replays
        from metaagent.replay import render_html

        tasks = [args.task] if args.task else None
        if args.task:
            run_a.select(args.task)  # a clear error for an unknown task
        path = render_html(run_a, args.html, comparison=cmp, tasks=tasks, max_tasks=args.html_tasks)
        err.print(f"wrote {path}", markup=False)
        return EXIT_OK
    data: dict[str, Any] = {}  # what --json prints (one section as itself, several as one object)
    if args.stats:
        data["stats"] = st = stats(run_a)
        if not args.json:
            show.print_stats(st, out)
    if cmp is not None and args.task:
        data["task_comparison"] = tc = cmp.task(args.task)
        if not args.json:
            show.print_task_comparison(tc, cmp, out)
    elif cmp is not None:
        data["comparison"] = cmp.to_dict()
        if not args.json:
            show.print_comparison(cmp, out)
    elif args.task:
        refs = run_a.select(args.task, step=args.step, kind=args.kind)
        data["trees"] = [r.tree.to_dict() for r in refs]
        if not args.json:
            show.print_task(
                refs, out, design=args.design, execution=args.execution, full=args.full, control=args.control
            )
    elif not args.stats:
        data["tasks"] = run_a.task_ids()
        if not args.json:
            show.print_listing(run_a, out)
    if args.json:
        _dump(next(iter(data.values())) if len(data) == 1 else data)
    return EXIT_OK


if __name__ == "__main__":
    main()
