"""What ``evidence.py`` and ``designer_choice.py`` share in their STATUS.md (a module they import, not a benchmark):
the rates of their compute plans (given by a flag, else measured, else a prior named as one), the plan's
machine-hours and sessions, and the STATUS.md block itself (the title with the status, the compute plan, the runs
table, how to continue). Each script keeps its own wording of what was measured where and what its prior is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path


def home_short(path: str | Path) -> str:
    """``path`` with the home folder written ``~`` (a STATUS.md names no machine's home)."""
    return str(path).replace(str(Path.home()), "~", 1)


def step_times(rows: Iterable[dict]) -> list[float]:
    """The seconds of each training step (``time/step_s`` of the rows with step >= 0) of a run's metrics."""
    return [r["time/step_s"] for r in rows if r.get("step", -1) >= 0 and "time/step_s" in r]


def rate(
    given: float, measured: Sequence[float], *, given_basis: str, measured_basis: str, prior: float, prior_basis: str
) -> tuple[float, str]:
    """A plan's rate and what it rests on: ``given`` (a flag, when not 0), else the mean of ``measured``
    (``measured_basis`` with ``{n}``, the count), else ``prior`` with ``prior_basis``, which says it is one."""
    if given:
        return given, given_basis
    if measured:
        return sum(measured) / len(measured), measured_basis.format(n=len(measured))
    return prior, prior_basis


def train_hours(steps: int, chunks: int, step_s: float, chunk_s: float) -> float:
    """Machine-hours of ``steps`` training steps run in ``chunks`` trainer starts of ``chunk_s`` seconds each."""
    return (steps * step_s + chunks * chunk_s) / 3600


def eval_hours(records: int, eval_n: int, per_minute: float) -> float:
    """Machine-hours of ``records`` held-out records of ``eval_n`` samples at ``per_minute`` records of n = 2."""
    return records * eval_n / 2 / per_minute / 60


def sessions_line(total_h: float, jobs: int, session_h: float) -> str:
    return (
        f"total {total_h:.1f} machine-hours = {total_h / jobs:.1f} h at {jobs} jobs = "
        f"{math.ceil(total_h / jobs / session_h)} sessions of {session_h} h."
    )


def write_status(
    results: str | Path,
    *,
    title: str,
    done: bool,
    plan: Sequence[str],
    runs: Sequence[str],
    columns: Sequence[str],
    rows: Sequence[str],
    how_title: str,
    how: Sequence[str],
    command: str,
    log: str,
) -> Path:
    """Write ``<results>/STATUS.md``: ``# <title> — status: done|PARTIAL``, the compute plan, the runs (``runs``
    paragraphs, then the table of ``columns`` and ``rows``) and how to continue in the background (``how``, then
    ``nohup <command> >> <log> 2>&1 &``)."""
    path = Path(results) / "STATUS.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([
        f"# {title} — status: {'done' if done else 'PARTIAL'}",
        "",
        "## Compute plan",
        "",
        *plan,
        "",
        "## Runs",
        "",
        *runs,
        "",
        "| " + " | ".join(columns) + " |",
        "| " + " | ".join("---" for _ in columns) + " |",
        *rows,
        "",
        f"## {how_title}",
        "",
        *how,
        "",
        f"    nohup {command} >> {log} 2>&1 &",
        "",
    ]))  # fmt: skip
    return path
