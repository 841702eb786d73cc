"""Sandbox overhead: check + compile + run per script with a ScriptedPolicy, and scripts/s with 2 workers.

    .venv/bin/python benchmarks/sandbox.py [--repeats 20] [--workers 2] [--threads 4]

Every timed script is made unique (a trailing comment) so neither the checker's cache nor the worker's
compile cache helps: the numbers are for a script seen for the first time. Worker start-up is excluded
(the pool is warmed first) and reported separately. The policy replies instantly, so what is measured
is the sandbox: libcst check, RestrictedPython compile, process round trips, record building.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from metaagent.policy import ScriptedPolicy
from metaagent.workflow import SandboxPool, check_script, load_templates


def reply(request) -> str:
    system = request.messages[0]["content"]
    body = (
        "CORRECT"
        if "CORRECT" in system
        else "VALID"
        if "VALID" in system
        else "```python\nprint(5)\n```"
        if "```python" in system
        else "\\boxed{5}"
    )
    return f"<delivery>{body}</delivery>"


TOOLS = {"run_tests": lambda program: "PASS: 1/1 tests passed", "run_program": lambda program, input="": "5"}


def median_ms(values: list[float]) -> float:
    return 1000 * statistics.median(values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20, help="timed runs per template")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--threads", type=int, default=4, help="host threads submitting scripts in the throughput test"
    )
    ap.add_argument("--throughput-scripts", type=int, default=400)
    args = ap.parse_args()

    templates = load_templates()
    policy = ScriptedPolicy(reply)
    with SandboxPool(workers=args.workers) as pool:
        t0 = time.perf_counter()
        pool.warm()
        startup = time.perf_counter() - t0
        for t in templates:  # warm code paths (not timed)
            pool.run(t.source, "What is 2 + 3?", policy, tools=TOOLS)

        rows = []
        for t in templates:
            check_s, sandbox_s, total_s, calls = [], [], [], 0
            for i in range(args.repeats):
                unique = f"{t.source}# check {i}\n"
                a = time.perf_counter()
                report = check_script(unique)
                check_s.append(time.perf_counter() - a)
                assert report.ok, report
                unique = f"{t.source}# run {i}\n"
                a = time.perf_counter()
                ex = pool.run(unique, "What is 2 + 3?", policy, tools=TOOLS, check=False)
                sandbox_s.append(time.perf_counter() - a)
                assert ex.status == "ok", ex.error
                calls = len(ex.turns) + len(ex.tool_calls)
                unique = f"{t.source}# all {i}\n"
                a = time.perf_counter()
                ex = pool.run(unique, "What is 2 + 3?", policy, tools=TOOLS)
                total_s.append(time.perf_counter() - a)
            rows.append((t.name, calls, median_ms(check_s), median_ms(sandbox_s), median_ms(total_s)))

        print(f"workers: {args.workers}, start-up of all workers: {startup * 1000:.0f} ms (excluded below)")
        mem = pool.worker_memory_kb()
        print(
            "worker memory (VmRSS / VmSize, KiB):",
            ", ".join(f"{m.get('VmRSS')} / {m.get('VmSize')}" for m in mem),
        )
        print()
        print(f"{'template':18} {'calls':>5} {'check ms':>9} {'compile+run ms':>15} {'total ms':>9}")
        for name, calls, c, s, tot in rows:
            print(f"{name:18} {calls:5d} {c:9.2f} {s:15.2f} {tot:9.2f}")
        totals = [r[4] for r in rows]
        print(f"{'median':18} {'':5} {statistics.median(r[2] for r in rows):9.2f} "
              f"{statistics.median(r[3] for r in rows):15.2f} {statistics.median(totals):9.2f}")  # fmt: skip

        # throughput: distinct scripts from several host threads sharing the pool
        jobs = [(f"{templates[i % len(templates)].source}# tp {i}\n") for i in range(args.throughput_scripts)]
        lock = threading.Lock()
        done = []

        def work() -> None:
            while True:
                with lock:
                    if not jobs:
                        return
                    src = jobs.pop()
                ex = pool.run(src, "What is 2 + 3?", policy, tools=TOOLS)
                with lock:
                    done.append(ex.status)

        threads = [threading.Thread(target=work) for _ in range(args.threads)]
        a = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        elapsed = time.perf_counter() - a
        ok = sum(s == "ok" for s in done)
        print()
        print(f"throughput: {len(done)} scripts ({ok} ok) in {elapsed:.2f} s from {args.threads} threads on "
              f"{args.workers} workers = {len(done) / elapsed:.0f} scripts/s")  # fmt: skip


if __name__ == "__main__":
    main()
