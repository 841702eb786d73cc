"""Replay and analysis of recorded rollouts (paper §4.4, App. C and E): what the designer built, how the
executors behaved, and how two checkpoints differ; ``metaagent-replay`` is a thin layer over this API.

In Python::

    from metaagent.replay import load_run, stats, compare, render_html, rerun

    run = load_run("runs/tiny")                 # a run directory, a record file, or a list of them
    run.bad_lines                               # skipped lines: file, line, reason
    run.select("bundled-math-1-000")            # the task's trees at its latest step
    stats(run)                                  # structure shares, role names, unique prompts, validity
    compare(run_sft, run_rl).summary()          # tasks solved only by B: same structure vs designer flip
    render_html(run, "report.html")             # self-contained report with plots
    rerun(run, "bundled-math-1-000", "tiny")    # re-execute a recorded design with a model

Only records are read (``metaagent.records``); re-running needs the sandbox and a policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

_EXPORTS = {
    "Run": "run",
    "TreeRef": "run",
    "load_run": "run",
    "benchmark_of": "run",
    "ReplayError": "errors",
    "stats": "summary",
    "Comparison": "comparison",
    "TaskComparison": "comparison",
    "TaskSide": "comparison",
    "compare": "comparison",
    "render_html": "report",
    "RerunResult": "reexecute",
    "rerun": "reexecute",
}
__all__ = [
    "Comparison",
    "ReplayError",
    "RerunResult",
    "Run",
    "TaskComparison",
    "TaskSide",
    "TreeRef",
    "benchmark_of",
    "compare",
    "load_run",
    "render_html",
    "rerun",
    "stats",
]
assert sorted(__all__) == sorted(_EXPORTS)

if TYPE_CHECKING:
    from .comparison import Comparison, TaskComparison, TaskSide, compare
    from .errors import ReplayError
    from .reexecute import RerunResult, rerun
    from .report import render_html
    from .run import Run, TreeRef, benchmark_of, load_run
    from .summary import stats


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
