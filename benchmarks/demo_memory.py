"""`make demo`'s peak resident memory with the update's heap mode and without it, side by side.

The update's heap mode (:func:`metaagent.train.local.models.update_heap`) hands the update's blocks of 256 KiB and more
to ``mmap`` so that backward's freed activations go back to the OS instead of leaving holes in the heap. This
script runs the demo's command (``train-metaagent --config default --stage-len 1 --steps 3 --data.batch-size 2``)
in fresh subprocesses, alternating ``heap`` (the code as it is) and ``no-heap`` (the mode replaced by a no-op),
``--pairs`` times, and reports per run: wall seconds, each step's rollout and update seconds as the trainer
logged them, and the peak RSS of the largest process of the run's process tree (sampled every 0.1 s; the sandbox
workers are separate, small processes). Ratios are no-heap / heap over the runs' means.

    .venv/bin/python benchmarks/demo_memory.py [--pairs 2] [--out benchmarks/results/demo_memory.txt]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ["--config", "default", "--stage-len", "1", "--steps", "3", "--data.batch-size", "2"]
RUNNER = {
    "heap": "from metaagent.cli.train import main; raise SystemExit(main())",
    "no-heap": (
        "import contextlib, metaagent.train.local.models as m; m.update_heap = contextlib.nullcontext\n"
        "from metaagent.cli.train import main; raise SystemExit(main())"
    ),
}
STEP_LINE = re.compile(r"\| (\d+)s \(rollout (\d+)s, update (\d+)s\)")


def _rss_mb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS")), 0)
    except OSError:
        return 0


def _tree(pid: int) -> list[int]:
    out, i = [pid], 0
    while i < len(out):
        try:
            for task in os.listdir(f"/proc/{out[i]}/task"):
                with open(f"/proc/{out[i]}/task/{task}/children") as f:
                    out += [int(c) for c in f.read().split()]
        except OSError:
            pass
        i += 1
    return out


def run_once(variant: str) -> dict:
    """One demo run in a fresh subprocess: wall seconds, per-step (total, rollout, update) seconds, peak RSS."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-c", RUNNER[variant], *DEMO, "--trainer.out", out]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        t0, peak = time.time(), 0
        with tempfile.TemporaryFile("w+") as log:
            p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
            while p.poll() is None:
                peak = max(peak, max(_rss_mb(q) for q in _tree(p.pid)))
                time.sleep(0.1)
            log.seek(0)
            text = log.read()
    if p.returncode:
        raise SystemExit(f"{variant} run failed (exit {p.returncode}):\n{text[-2000:]}")
    steps = [tuple(map(int, m.groups())) for m in STEP_LINE.finditer(text)]
    return {"variant": variant, "wall": time.time() - t0, "steps": steps, "peak_mb": peak, "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=2, help="alternating (no-heap, heap) pairs")
    ap.add_argument("--out", type=Path, help="also write the report here")
    args = ap.parse_args()
    runs = [run_once(v) for _ in range(args.pairs) for v in ("no-heap", "heap")]
    lines = [f"# python benchmarks/demo_memory.py --pairs {args.pairs}   ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})"]
    lines.append("variant   wall s  peak RSS MiB  load  steps (total/rollout/update s)")
    for r in runs:
        steps = "  ".join("/".join(map(str, s)) for s in r["steps"])
        lines.append(f"{r['variant']:8s} {r['wall']:7.1f} {r['peak_mb']:13d} {r['load']:5.1f}  {steps}")
    mean = {v: {k: statistics.mean(f(r) for r in runs if r["variant"] == v) for k, f in (
        ("wall", lambda r: r["wall"]), ("peak", lambda r: r["peak_mb"]),
        ("update", lambda r: sum(s[2] for s in r["steps"])), ("rollout", lambda r: sum(s[1] for s in r["steps"])),
    )} for v in RUNNER}  # fmt: skip
    h, n = mean["heap"], mean["no-heap"]
    lines.append(
        f"means: heap peak {h['peak']:.0f} MiB vs no-heap {n['peak']:.0f} MiB ({h['peak'] / n['peak']:.2f}x); "
        f"wall {h['wall']:.1f} vs {n['wall']:.1f} s ({h['wall'] / n['wall']:.2f}x); updates {h['update']:.0f} vs "
        f"{n['update']:.0f} s ({h['update'] / n['update']:.2f}x); rollouts {h['rollout']:.0f} vs {n['rollout']:.0f} s"
    )
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
