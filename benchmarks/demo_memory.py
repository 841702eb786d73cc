"""`make demo`'s peak resident memory under the update's memory modes, side by side in one run.

The demo's command (``train-metaagent --config default --stage-len 1 --steps 3 --data.batch-size 2``) runs in
fresh subprocesses, one per variant per round, ``--rounds`` times:

- ``selective``: the code as it is: the update's heap mode (:func:`metaagent.train.local.models.update_heap`) and
  selective recomputation (``optim.recompute``, :mod:`metaagent.learn.recompute`: decoder layers keep only
  their matrix products' outputs for backward);
- ``keep-all``: heap mode, every activation kept (the default before selective recomputation);
- ``no-heap``: neither (the mode replaced by a no-op, everything kept).

Per run: the peak RSS of the trainer process as the kernel counts it (``wait4``'s ``ru_maxrss``, KiB, what
``/usr/bin/time -v`` reports; the sandbox workers are separate, small processes), wall seconds, and each step's
rollout and update seconds as the trainer logged them. Ratios are each variant's mean over the first variant's.
``--jobs 2`` runs a round's variants at the same time: peaks are unaffected, times then share the cores.

    .venv/bin/python benchmarks/demo_memory.py [--variants keep-all,selective] [--rounds 1] [--jobs 1]
        [--out benchmarks/results/demo_memory.txt]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ["--config", "default", "--stage-len", "1", "--steps", "3", "--data.batch-size", "2"]
MAIN = "from metaagent.cli.train import main; raise SystemExit(main())"
NO_HEAP = "import contextlib, metaagent.train.local.models as m; m.update_heap = contextlib.nullcontext\n"
# a dataclass default is baked into __init__: the updater's call is replaced (the model then keeps everything)
KEEP_ALL = "import metaagent.train.local.update as u; u.enable_recompute = lambda model, mode: None  # as optim.recompute=off\n"
RUNNER = {"selective": MAIN, "keep-all": KEEP_ALL + MAIN, "no-heap": NO_HEAP + KEEP_ALL + MAIN}
STEP_LINE = re.compile(r"\| (\d+)s \(rollout (\d+)s, update (\d+)s\)")


def run_once(variant: str) -> dict:
    """One demo run in a fresh subprocess: wall seconds, per-step (total, rollout, update) seconds, peak RSS."""
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryFile("w+") as log:
        cmd = [sys.executable, "-c", RUNNER[variant], *DEMO, "--trainer.out", out]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
        t0 = time.time()
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(p.pid, 0)  # this child's own peak, also when runs overlap
        wall = time.time() - t0
        log.seek(0)
        text = log.read()
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{variant} run failed (exit {os.waitstatus_to_exitcode(status)}):\n{text[-2000:]}")
    steps = [tuple(map(int, m.groups())) for m in STEP_LINE.finditer(text)]
    return {"variant": variant, "wall": wall, "steps": steps, "peak_kib": usage.ru_maxrss, "load": os.getloadavg()[0]}


def run_round(variants: list[str], jobs: int) -> list[dict]:
    if jobs == 1:
        return [run_once(v) for v in variants]
    results: dict[str, dict] = {}
    threads = [threading.Thread(target=lambda v=v: results.__setitem__(v, run_once(v))) for v in variants]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    missing = [v for v in variants if v not in results]
    if missing:
        raise SystemExit(f"variant(s) {missing} failed; see the error above")
    return [results[v] for v in variants]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="keep-all,selective", help=f"comma-separated, first is the baseline; of {list(RUNNER)}")
    ap.add_argument("--rounds", type=int, default=1, help="fresh runs of every variant")
    ap.add_argument("--jobs", type=int, choices=(1, 2), default=1, help="2: a round's variants run at the same time")
    ap.add_argument("--out", type=Path, help="also write the report here")
    args = ap.parse_args()
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(RUNNER))
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; choose from {list(RUNNER)}")
    if args.jobs == 2 and len(variants) != 2:
        raise SystemExit("--jobs 2 runs exactly two variants at once; pass two --variants")
    runs = [r for _ in range(args.rounds) for r in run_round(variants, args.jobs)]
    cmd = f"python benchmarks/demo_memory.py --variants {args.variants} --rounds {args.rounds} --jobs {args.jobs}"
    lines = [f"# {cmd}   ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores)"]
    lines.append("variant     wall s  peak RSS KiB  load  steps (total/rollout/update s)")
    for r in runs:
        steps = "  ".join("/".join(map(str, s)) for s in r["steps"])
        lines.append(f"{r['variant']:10s} {r['wall']:7.1f} {r['peak_kib']:13,d} {r['load']:5.1f}  {steps}")
    mean = {v: {k: statistics.mean(f(r) for r in runs if r["variant"] == v) for k, f in (
        ("wall", lambda r: r["wall"]), ("peak", lambda r: r["peak_kib"]),
        ("update", lambda r: sum(s[2] for s in r["steps"])), ("rollout", lambda r: sum(s[1] for s in r["steps"])),
    )} for v in variants}  # fmt: skip
    base = mean[variants[0]]
    for v in variants[1:]:
        m = mean[v]
        lines.append(
            f"{v} / {variants[0]}: peak {m['peak']:,.0f} / {base['peak']:,.0f} KiB ({m['peak'] / base['peak']:.2f}x, "
            f"{m['peak'] * 1024 / 1e9:.2f} / {base['peak'] * 1024 / 1e9:.2f} GB); wall {m['wall'] / base['wall']:.2f}x; "
            f"updates {m['update']:.0f} / {base['update']:.0f} s ({m['update'] / base['update']:.2f}x); "
            f"rollouts {m['rollout']:.0f} / {base['rollout']:.0f} s"
        )
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
