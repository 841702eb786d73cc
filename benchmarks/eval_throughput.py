"""Held-out evaluation throughput: ``metaagent-eval``'s records a minute before and after issue 63's batching.

Side by side in one run, on the same slice of the suite's test split (``--limit`` tasks of each family x
``--methods``, n samples each), the same model, dtype, lengths and seed; each mode its own results folder:

- ``old``: the settings of the committed held-out evaluations (``benchmarks/coevolution_v2.py``:
  ``--concurrency 16 --continuous --sandbox-workers 2``) with the batcher eval used before: up to
  ``max_batch_size`` requests grouped into one backend call, 4 such calls in flight, each caller waiting for
  the longest row of its group;
- ``new``: today's defaults (``concurrency``, ``sandbox_workers`` auto, continuous batching with every request
  its own backend call: :func:`metaagent.policy.factory.batcher_options`);
- ``serial`` (optional): one task at a time, static batches, 2 workers: the exact-replay reference.

A *record* is one (task, method) tree of n samples, what ``metaagent-eval`` appends to its files. The rate is
records over the time from the first task's start to the last task's end (model loading excluded; the results
rewrites during the run included). Modes run interleaved (``--repeats``: old new old new ...), min and median
kept. Also printed: decode rows per step (the batch the decoder saw), generated tokens a second, the sandbox
workers' memory after the run (RSS and PSS per worker), whether the modes sampled the same records, and the
held-out set's projected hours (``--project-records``, default 150 tasks x 5 methods = 750 records).

    PYTHONPATH=$PWD HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/eval_throughput.py \\
        [--model embedded-sft-suite] [--limit 2] [--n 4] [--modes old new] [--repeats 1] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from metaagent.data.suite import FAMILIES, family_source
from metaagent.eval import Evaluation, make_config
from metaagent.eval.runner import EvalObserver
from metaagent.policy.precision import resolve_dtype
from metaagent.records import read_trees

#: the committed held-out settings (benchmarks/coevolution_v2.py, coevolution_cpu.py: evaluate)
OLD = {"concurrency": 16, "continuous": True, "sandbox_workers": 2}
SERIAL = {"concurrency": 1, "continuous": False, "sandbox_workers": 2}
#: the held-out oracles of the five families and the two baselines (5 methods, as the 150 x 5 x 4 set)
METHODS = ("sa", "auto", "fixed:tool_pair", "fixed:sample_tests", "fixed:self_consistency")


class Clock(EvalObserver):
    """First task start and last task end (the observer hooks the runner calls from its threads)."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last = 0.0
        self.done = 0
        self._lock = threading.Lock()

    def part(self, label: str, todo: int) -> None:
        with self._lock:
            self.first = self.first or time.perf_counter()

    def task_done(self, tree: Any) -> None:
        with self._lock:
            self.last, self.done = time.perf_counter(), self.done + 1


def decode_rows_spy() -> list[int]:
    """Rows of every decode step of the hf policy (``_RunningBatch.step``), appended while patched."""
    from metaagent.policy import hf

    rows: list[int] = []
    if not hasattr(hf._RunningBatch, "_unspied_step"):
        hf._RunningBatch._unspied_step = hf._RunningBatch.step

        def step(self):
            hf._RunningBatch._rows_log.append(len(self.rows))
            return hf._RunningBatch._unspied_step(self)

        hf._RunningBatch.step = step
    hf._RunningBatch._rows_log = rows
    return rows


def old_policy(args: argparse.Namespace):
    """The eval policy as the runner built it before (``max_in_flight=4`` grouped calls)."""
    from metaagent.policy.factory import build_policy

    return build_policy(
        "hf", args.model, device="cpu", dtype=args.dtype, max_batch_size=args.max_batch_size, continuous=True,
        batching=True, max_in_flight=4,
    )  # fmt: skip


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its reaped children (sandbox workers, code runs): on a
    shared machine the CPU a mode spends per record is steadier than its wall time (it includes model loading
    and the final scoring, which both modes pay alike)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def worker_memory(pool) -> dict[str, Any]:
    """RSS and PSS (MiB) of each live sandbox worker: PSS counts shared pages once per sharer."""
    rss, pss = [], []
    for info in pool.worker_info():
        pid = info.get("pid")
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        lines = [line.split() for line in text.splitlines()[1:]]
        fields = {parts[0].rstrip(":"): int(parts[1]) for parts in lines if len(parts) > 1}
        rss.append(fields.get("Rss", 0) / 1024)
        pss.append(fields.get("Pss", 0) / 1024)
    if not rss:
        return {"workers": 0}
    return {"workers": len(rss), "rss_mib_mean": statistics.mean(rss), "rss_mib_max": max(rss),
            "pss_mib_mean": statistics.mean(pss), "pss_mib_total": sum(pss)}  # fmt: skip


def run_mode(mode: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One evaluation of the slice under ``mode``; its rate, decode rows, worker memory and samples."""
    from metaagent.workflow import SandboxPool

    settings = {"old": OLD, "serial": SERIAL, "new": {}}[mode]
    config = make_config(
        models=[args.model], methods=list(args.methods),
        benchmarks=[f"{family_source(f)}:test" for f in args.families],
        limit=args.limit, n=args.n, k=[1, args.n], seed=args.seed, temperature=0.7, dtype=args.dtype,
        max_batch_size=args.max_batch_size, designer_max_tokens=args.designer_max_tokens,
        executor_max_tokens=args.executor_max_tokens, out=str(out), fresh=True, html=False, **settings,
    )  # fmt: skip
    policies = {args.model: old_policy(args)} if mode == "old" else None
    clock, rows = Clock(), decode_rows_spy()
    pool = SandboxPool(workers=int(config.sandbox_workers))
    cpu0 = cpu_seconds()
    try:
        evaluation = Evaluation(config, policies=policies, observer=clock, pool=pool)
        evaluation.run()
        memory = worker_memory(pool)
    finally:
        pool.close()  # the workers are reaped here: their CPU time joins the children's
        if policies:
            policies[args.model].close()
    cpu = cpu_seconds() - cpu0
    wall = clock.last - (clock.first or clock.last)
    samples = read_samples(out)
    tokens = sum(n for _, n in samples.values())
    return {
        "mode": mode, "concurrency": config.concurrency, "sandbox_workers": config.sandbox_workers,
        "continuous": config.continuous, "records": clock.done, "wall_s": wall,
        "records_per_min": 60 * clock.done / wall if wall else None, "generated_tokens": tokens,
        "tokens_per_s": tokens / wall if wall else None, "decode_steps": len(rows),
        "decode_rows_mean": statistics.mean(rows) if rows else None,
        "decode_rows_p90": sorted(rows)[int(0.9 * (len(rows) - 1))] if rows else None,
        "cpu_s": cpu, "records_per_cpu_min": 60 * clock.done / cpu if cpu else None,
        "worker_memory": memory, "samples": {k: v[0] for k, v in samples.items()},
    }  # fmt: skip


def read_samples(out: Path) -> dict[str, tuple[list, int]]:
    """(record file, task) -> (designer scripts and agent replies, generated tokens) of a results folder."""
    found = {}
    for path in sorted((out / "rollouts").rglob("*.jsonl")):
        trees, _ = read_trees(path)
        for t in trees:
            replies = [(d.script, [[u.response for u in e.turns] for e in d.executions]) for d in t.designs]
            tokens = sum(len(d.sample.response_ids or []) for d in t.designs if d.sample)
            tokens += sum(len(u.response_ids or []) for d in t.designs for e in d.executions for u in e.turns)
            found[f"{path.relative_to(out)}::{t.task_id}"] = (replies, tokens)
    return found


def summary(runs: list[dict[str, Any]], modes: list[str], project: int) -> dict[str, Any]:
    """Min and median records a minute per mode, the ratio to ``old`` and the projected hours."""
    out: dict[str, Any] = {}
    for mode in modes:
        rates = [r["records_per_min"] for r in runs if r["mode"] == mode and r["records_per_min"]]
        best = max(rates)
        per_cpu = statistics.median(r["records_per_cpu_min"] for r in runs if r["mode"] == mode)
        out[mode] = {
            "records_per_min_best": best, "records_per_min_median": statistics.median(rates),
            "projected_hours": project / best / 60,
            "projected_hours_median": project / statistics.median(rates) / 60,
            "records_per_cpu_min_median": per_cpu,
            # the set's CPU time spread over two whole cores: a lower bound of its hours on 2 idle cores
            "projected_hours_two_idle_cores": project / per_cpu / 60 / 2,
        }  # fmt: skip
    if "old" in out:
        for mode in modes:
            old = out["old"]
            out[mode]["speedup_vs_old"] = out[mode]["records_per_min_median"] / old["records_per_min_median"]
            out[mode]["cpu_speedup_vs_old"] = (
                out[mode]["records_per_cpu_min_median"] / old["records_per_cpu_min_median"]
            )
    first = {m: next(r for r in runs if r["mode"] == m)["samples"] for m in modes}
    base = first[modes[0]]
    out["same_samples"] = {m: sum(base.get(k) == v for k, v in s.items()) for m, s in first.items()}
    out["records_compared"] = len(base)
    return out


def machine() -> dict[str, Any]:
    flags = ""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        flags = next(line for line in lines if line.startswith("flags"))
    except (OSError, StopIteration):
        pass
    kind = next((k for k in ("amx_bf16", "avx512_bf16", "avx2") if k in flags), "other")
    name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), platform.processor())  # fmt: skip
    return {"cpu": name, "kind": kind, "cores": os.cpu_count()}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded-sft-suite")
    p.add_argument("--families", nargs="+", default=list(FAMILIES))
    p.add_argument("--methods", nargs="+", default=list(METHODS))
    p.add_argument("--limit", type=int, default=2, help="tasks of each family's test split")
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto", type=resolve_dtype,
                   help="the held-out runs' dtype on this CPU kind (auto: bfloat16 where the CPU has bf16 units, "
                   "else float32)")  # fmt: skip
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument("--designer-max-tokens", type=int, default=384)
    p.add_argument("--executor-max-tokens", type=int, default=192)
    p.add_argument("--modes", nargs="+", default=["old", "new"], choices=["old", "new", "serial"])
    p.add_argument("--repeats", type=int, default=1, help="rounds of the modes, interleaved")
    p.add_argument("--project-records", type=int, default=150 * 5, help="records of the set to project")
    p.add_argument("--out", help="write the JSON here")
    args = p.parse_args(argv)

    info = {"machine": machine(), "uptime_before": uptime(), "args": vars(args), "runs": []}
    print(f"{info['machine']}  |  {info['uptime_before']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="eval_throughput_") as tmp:
        for r in range(args.repeats):
            for mode in args.modes:
                run = run_mode(mode, args, Path(tmp) / f"{mode}_{r}")
                info["runs"].append(run)
                print(f"round {r} {mode:6s}: {run['records']} records in {run['wall_s']:.0f} s = "
                      f"{run['records_per_min']:.2f} records/min "
                      f"({run['records_per_cpu_min']:.2f} a CPU minute), "
                      f"{run['tokens_per_s']:.1f} tok/s, decode rows mean {run['decode_rows_mean']:.1f} "
                      f"(p90 {run['decode_rows_p90']}), workers {run['worker_memory']}  |  {uptime()}",
                      flush=True)  # fmt: skip
    info["uptime_after"] = uptime()
    info["summary"] = summary(info["runs"], args.modes, args.project_records)
    for run in info["runs"]:
        run.pop("samples")
    print(json.dumps(info["summary"], indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
