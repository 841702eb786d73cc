"""Per-seed gains and their across-seed interval (issue 61, item 2): one ``metaagent-eval`` results directory
per
training seed, the gain ``B - A`` of two methods on each seed's tasks (paired task bootstrap: the detail),
and the
mean over seeds with a t interval over the seeds (the headline; ``metaagent.eval.across_seeds``).

    python benchmarks/seed_gains.py --results runs/s0/heldout runs/s1/heldout runs/s2/heldout \\
        --a sa@auto --b auto --benchmark suite:test --out gains.json --png gains.png

``--a`` / ``--b`` are method names of the results (``sa``, ``sa@auto``, ``best-per-domain``, ``auto``, ...),
or
``max`` of several (``--a max:sa@auto,fixed:pot,best-per-domain``: per seed, the one with the highest mean on
the
tasks, i.e. the strongest baseline of that seed, named in the output). Each directory holds one checkpoint's
evaluation (its results.json); ``--cell`` picks the model cell when it holds several (default: the only one).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


MAX_PREFIX = "max:"


def read_scores(results: dict, cell: str | None, bench: str, method: str) -> list:
    """The per-task scores of ``method`` on ``bench`` in a results.json (one cell, or ``cell``)."""
    from metaagent.eval import TaskScore

    cells = results["cells"]
    if cell is None:
        if len(cells) != 1:
            raise SystemExit(f"the results hold cells {sorted(cells)}: pick one with --cell")
        cell = next(iter(cells))
    entry = cells[cell]["benchmarks"].get(bench, {}).get(method)
    if entry is None:
        raise SystemExit(f"no {method!r} on {bench!r} in cell {cell!r}; methods there: "
                         f"{sorted(cells[cell]['benchmarks'].get(bench, {}))}")  # fmt: skip
    return [TaskScore.from_dict(t) for t in entry["per_task"]]


def side(results: dict, args: argparse.Namespace, spec: str, k: int) -> tuple[str, list]:
    """(method name, its scores): ``spec`` itself, or of ``max:m1,m2`` the method with the highest mean
    avg@k."""
    from statistics import fmean

    if not spec.startswith(MAX_PREFIX):
        return spec, read_scores(results, args.cell, args.benchmark, spec)
    options = {
        m: read_scores(results, args.cell, args.benchmark, m) for m in spec[len(MAX_PREFIX) :].split(",")
    }

    def mean(scores: list) -> float:
        vals = [s.avg.get(k) for s in scores if s.avg.get(k) is not None]
        return fmean(vals) if vals else float("-inf")

    best = max(options, key=lambda m: (mean(options[m]), -list(options).index(m)))
    return best, options[best]


def gains(args: argparse.Namespace) -> dict:
    """Each seed's paired comparison ``b - a`` and the across-seed summary."""
    from metaagent.eval import across_seeds, paired_comparison

    per_seed = {}
    for folder in args.results:
        results = json.loads((Path(folder) / "results.json").read_text())
        k = args.k or results["k_main"]
        seed = results["config"]["seed"] if args.seed_key == "eval" else folder
        name_a, a = side(results, args, args.a, k)
        name_b, b = side(results, args, args.b, k)
        cmp = paired_comparison(a, b, k=k, n_boot=args.bootstrap)
        if cmp["diff"] is None:
            raise SystemExit(f"{folder}: {name_a} and {name_b} share no scored task on {args.benchmark}")
        per_seed[str(seed)] = {"folder": str(folder), "a": name_a, "b": name_b, "tasks": cmp["tasks"],
                               "diff": cmp["diff"], "ci95": cmp["ci95"]}  # fmt: skip
    summary = across_seeds(per_seed)
    summary["per_seed"] = per_seed
    return {"a": args.a, "b": args.b, "benchmark": args.benchmark, **summary}


def plot(result: dict, path: Path) -> None:
    """Per-seed gains (points with their task-bootstrap intervals) and the across-seed mean with its t
    interval."""
    from metaagent.eval.html import figure, palette_png

    fig, ax = figure((5.0, 3.0))
    seeds = list(result["per_seed"])
    for i, s in enumerate(seeds):
        g = result["per_seed"][s]
        lo, hi = g["ci95"]
        ax.errorbar([i], [100 * g["diff"]], yerr=[[100 * (g["diff"] - lo)], [100 * (hi - g["diff"])]], fmt="o",
                    color="0.3", capsize=3)  # fmt: skip
    if result.get("ci95"):
        lo, hi = result["ci95"]
        m = result["mean"]
        ax.errorbar(
            [len(seeds)], [100 * m], yerr=[[100 * (m - lo)], [100 * (hi - m)]], fmt="s", color="C3", capsize=4
        )
    ax.axhline(0.0, color="0.6", linewidth=0.8)
    ax.set_xticks(range(len(seeds) + 1))
    ax.set_xticklabels([f"seed {s}" for s in seeds] + ["mean (t over seeds)"], fontsize=7)
    ax.set_ylabel(f"{result['b']} - {result['a']} (points)", fontsize=8)
    path.write_bytes(palette_png(fig))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--results", nargs="+", required=True, help="one metaagent-eval results directory per seed"
    )
    p.add_argument("--a", required=True, help="the baseline method (or max:m1,m2,...)")
    p.add_argument("--b", required=True, help="the compared method (or max:m1,m2,...)")
    p.add_argument("--benchmark", required=True, help="benchmark label as in the results (suite:test, ...)")
    p.add_argument("--cell", default=None, help="model cell (default: the results' only one)")
    p.add_argument("--k", type=int, default=0, help="avg@k budget (default: the results' k_main)")
    p.add_argument("--bootstrap", type=int, default=1000)
    p.add_argument("--seed-key", choices=("eval", "folder"), default="folder",
                   help="name each seed by its folder (default) or by the evaluation's --seed")  # fmt: skip
    p.add_argument("--out", default=None, help="write the result as JSON here")
    p.add_argument("--png", default=None, help="plot the per-seed gains here")
    args = p.parse_args()
    result = gains(args)
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.png:
        plot(result, Path(args.png))
    print(text)


if __name__ == "__main__":
    main()
