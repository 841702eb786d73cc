"""Time the README's tour: each numbered step of its ``bash`` block as written, wall and CPU time, on this CPU.

    python benchmarks/tour.py                      # this CPU as it is (policy.dtype auto)
    METAAGENT_CPU_KIND=AVX2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python benchmarks/tour.py
                                                   # the AVX2 kind's choices and kernels on a faster CPU (a proxy)

The block under "## A 5-minute tour" is split at its ``# 1.`` ... ``# 5.`` comments; each step runs in a fresh
``bash -e`` from one temporary folder (so ``runs/tour`` of step 1 is there for step 4), with ``.venv/bin`` first
on ``PATH``. Per step: wall seconds and the CPU seconds (user + sys) of everything it started. The table names
the CPU kind (``metaagent.policy.precision.cpu_kind``, after ``$METAAGENT_CPU_KIND``) and the load average
before and after: a wall time is only the machine's when the load stays near 0. ``--out`` writes the table.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^# (\d)\. (.*)$")


def tour_steps(readme: Path) -> list[tuple[str, str]]:
    """(title, bash text) of each numbered step of the README's tour block."""
    text = readme.read_text()
    start = text.index("## A 5-minute tour")
    block = text[text.index("```bash\n", start) + len("```bash\n") :]
    block = block[: block.index("```")]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        m = STEP.match(line)
        if m:
            title = re.split(r"[:;(]", m.group(2))[0].strip()
            steps.append((f"{m.group(1)}. {title}", []))
        elif steps:
            steps[-1][1].append(line)
    if not steps:
        raise SystemExit(f"{readme}: no '# 1.' ... steps in the tour's bash block")
    return [(title, "\n".join(lines)) for title, lines in steps]


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--readme", default=str(ROOT / "README.md"))
    p.add_argument("--venv", default=str(ROOT / ".venv"))
    p.add_argument("--out", help="write the table here too")
    args = p.parse_args()
    from metaagent.policy.precision import cpu_kind

    env = {**os.environ, "PATH": f"{Path(args.venv) / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    rows = []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tour-") as cwd:
        for title, script in tour_steps(Path(args.readme)):
            cpu0, t0 = children_cpu(), time.perf_counter()
            # `wait`: a step's background job (the server) is reaped by its shell, so its CPU time is counted
            done = subprocess.run(["bash", "-e", "-c", f"{script}\nwait"], cwd=cwd, env=env, capture_output=True,
                                  text=True)  # fmt: skip
            wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
            if done.returncode:
                tail = (done.stdout + done.stderr)[-2000:]
                raise SystemExit(f"tour step {title!r} failed (exit {done.returncode}):\n{tail}")
            rows.append((title, wall, cpu))
            print(f"{title}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    kind = cpu_kind()
    emulated = " (emulated: $METAAGENT_CPU_KIND)" if os.environ.get("METAAGENT_CPU_KIND") else ""
    lines = [f"CPU kind {kind}{emulated}, {os.cpu_count()} cores; load average {load0:.2f} before, "
             f"{os.getloadavg()[0]:.2f} after", "", "| tour step | wall (s) | CPU (s) |", "| --- | --- | --- |"]  # fmt: skip
    lines += [f"| {t} | {w:.1f} | {c:.1f} |" for t, w, c in rows]
    lines.append(f"| total | {sum(r[1] for r in rows):.1f} ({sum(r[1] for r in rows) / 60:.1f} min) | "
                 f"{sum(r[2] for r in rows):.1f} |")  # fmt: skip
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
