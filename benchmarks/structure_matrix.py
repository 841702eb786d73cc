"""The structure matrix's report (issue #42): families x methods from the records of ``structure_matrix.sh``.

    .venv/bin/python benchmarks/structure_matrix.py --out benchmarks/results/structure_matrix

Reads every evaluation record under ``OUT/evals/*/rollouts/`` (``metaagent-eval`` output directories: one for
the math families' methods, one for the code family's) and writes ``OUT/table.md`` and ``OUT/matrix.json``:

* the matrix: avg@k per family x method with bootstrap 95% CIs over tasks;
* per family: its oracle (the best of ``sa`` and the fixed templates on the family's tasks), oracle - ``sa`` and
  ``auto`` - ``sa`` with paired bootstrap CIs, and the designer's (``auto``) valid rate and its share of the
  oracle's pattern and structure class;
* the mixture (families weighted equally): each method, the per-family oracle, the best single method, and
  oracle - best single, in-sample and cross-fitted (the oracle chosen on the other half of the tasks);
* the issue's criteria, each with the numbers that decide it.

A partial run is reported over the tasks recorded so far (the task counts are in the tables); the numbers
come from :mod:`metaagent.eval.matrix` and :func:`metaagent.eval.paired_comparison`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


GAIN_POINTS = 20.0  # a template beats sa by this much (avg@k points) with a CI above 0, in >= 2 families
ORACLE_POINTS = 10.0  # the per-family oracle beats the best single template on the mixture by this much
SHARE_MAX = 0.40  # the cold-start designer's share of each family's oracle structure, at most


def load(out: Path, k: int):
    from metaagent.eval.scoring import score_task
    from metaagent.records import glob_records, read_trees

    trees, scores = defaultdict(list), defaultdict(list)
    for path in glob_records(out, "evals/*/rollouts/*/*/*.jsonl"):  # plain or compressed (.jsonl.xz)
        found, bad = read_trees(path)
        if bad:
            print(f"warning: {len(bad)} unreadable line(s) in {path}", file=sys.stderr)
        for tree in found:
            key = ((tree.task.get("metadata") or {}).get("family", "?"), tree.config["eval"]["method"])
            trees[key].append(tree)
            scores[key].append(score_task(tree, [1, k]))
    return trees, scores


def pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def ci(c) -> str:
    return "—" if not c or c.get("mean") is None else f"{pct(c['mean'])} [{pct(c['ci95'][0])}, {pct(c['ci95'][1])}]"


def diff(d) -> str:
    from metaagent.eval.report import signed

    if not d or d.get("diff") is None:
        return "—"
    lo, hi = d["ci95"]
    return f"{signed(100 * d['diff'])} [{signed(100 * lo)}, {signed(100 * hi)}] ({d['tasks']} tasks)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="benchmarks/results/structure_matrix")
    p.add_argument("--k", type=int, default=4, help="avg@k budget (the samples per task)")
    args = p.parse_args()

    from metaagent.eval import paired_comparison
    from metaagent.eval.matrix import cell, compute, mixture, oracle, pattern_share
    from metaagent.eval.methods import AUTO, SA, template_for
    from metaagent.workflow import load_templates
    from metaagent.workflow.analysis import PATTERN_STRUCTURE

    out = Path(args.out)
    trees, scores = load(out, args.k)
    if not scores:
        raise SystemExit(f"no records under {out}/evals/*/rollouts; run benchmarks/structure_matrix.sh first")
    families = sorted({f for f, _ in scores})
    methods = sorted({m for _, m in scores}, key=lambda m: (m != SA, m == AUTO, m))
    bank = {t.name: t for t in load_templates()}

    def pattern_of(method: str, family: str) -> str:
        if method == SA:
            return "single"
        name = method.split(":", 1)[1]
        domain = trees[family, method][0].task["domain"]
        return bank[template_for(name, domain, list(bank.values()))].pattern

    k = args.k
    matrix = {f: {m: cell(scores[f, m], k=k) for m in methods if (f, m) in scores} for f in families}
    per_family = {}
    for f in families:
        best = oracle(scores, f, k=k)
        entry = {"oracle": best, "oracle_pattern": pattern_of(best, f)}
        entry["oracle_structure"] = PATTERN_STRUCTURE.get(entry["oracle_pattern"], "other")
        entry["oracle_minus_sa"] = paired_comparison(scores[f, SA], scores[f, best], k=k) if (f, SA) in scores else None
        gains = {}
        for m in methods:
            if m not in (SA, AUTO) and (f, m) in scores and (f, SA) in scores:
                gains[m] = paired_comparison(scores[f, SA], scores[f, m], k=k)
        entry["template_minus_sa"] = gains
        if (f, AUTO) in trees:
            entry["auto_minus_sa"] = paired_comparison(scores[f, SA], scores[f, AUTO], k=k) if (f, SA) in scores else None
            entry["auto_oracle_pattern"] = pattern_share(trees[f, AUTO], entry["oracle_pattern"])
            valid = [d for t in trees[f, AUTO] for d in t.designs if d.valid]
            structures = defaultdict(int)
            for d in valid:
                structures[(d.structure or {}).get("structure", "other")] += 1
            entry["auto_structures"] = {s: n / len(valid) for s, n in sorted(structures.items(), key=lambda x: -x[1])}
            entry["auto_oracle_structure_share"] = structures.get(entry["oracle_structure"], 0) / len(valid) if valid else None
        per_family[f] = entry
    mix = mixture(scores, families, methods, k=k)
    tool_runs = {}  # run_program calls in every method's executions: how many printed an answer without error
    for f in families:
        calls = [c for m in methods for t in trees.get((f, m), []) for d in t.designs for e in d.executions
                 for c in e.tool_calls if c.name == "run_program"]  # fmt: skip
        printed = sum(1 for c in calls if c.ok and not c.result.startswith("ERROR")
                      and c.result.strip() not in ("", "(the program printed nothing)"))  # fmt: skip
        tool_runs[f] = {"run_program_calls": len(calls), "printed": printed, "share": printed / len(calls) if calls else None}
    shortcuts = defaultdict(lambda: defaultdict(int))
    for (f, m), ss in scores.items():
        for s in ss:
            for name, n in (s.shortcuts or {}).items():
                shortcuts[m][name] += n

    # ---- criteria ----------------------------------------------------------------------------------------------
    strong = {}
    for f, e in per_family.items():
        wins = [m for m, d in e["template_minus_sa"].items() if d["diff"] is not None
                and 100 * d["diff"] >= GAIN_POINTS and d["ci95"][0] > 0]  # fmt: skip
        if wins:
            strong[f] = wins
    best_templates = {f: e["oracle"] for f, e in per_family.items()}
    single = [f for f, e in per_family.items() if e["oracle_structure"] == "single"]
    gap = mix["oracle_minus_best_single"]
    shares = {f: e.get("auto_oracle_pattern", {}).get("share") for f, e in per_family.items()}
    criteria = {
        "families_with_a_template_20_points_above_sa_ci_above_0": strong,
        "best_template_differs_between_families": len(set(best_templates.values())) > 1,
        "families_best_served_by_a_single_agent": single,
        "oracle_minus_best_single_points": 100 * gap["diff"],
        "oracle_minus_best_single_ci95_points": [100 * x for x in gap["ci95"]],
        "auto_oracle_pattern_share_per_family": shares,
        "auto_oracle_pattern_share_at_most_40": all(s is not None and s <= SHARE_MAX for s in shares.values()),
    }
    tasks = {f: max((len(scores[f, m]) for m in methods if (f, m) in scores), default=0) for f in families}
    result = {"k": k, "families": families, "methods": methods, "tasks": tasks, "matrix": matrix,
              "per_family": per_family, "mixture": mix, "shortcuts": shortcuts, "criteria": criteria,
              "run_program": tool_runs}  # fmt: skip
    (out / "matrix.json").write_text(json.dumps(result, indent=1, default=dict) + "\n")

    # ---- table.md --------------------------------------------------------------------------------------------
    lines = [
        f"# Structure matrix: avg@{k} (%) per family x method, 95% bootstrap CI over tasks",
        "",
        "Tasks recorded per family: "
        + ", ".join(f"{f} {n}" for f, n in tasks.items())
        + ". `—`: not run (a template of the other domain). Oracle: the family's best of `sa` and the fixed "
        "templates (in-sample).",
        "",
        "| method | "
        + " | ".join(families)
        + " | mixture | exec calls/sample | designer calls/sample | tokens/sample |",
        "|---|" + "---|" * (len(families) + 4),
    ]
    for m in methods:
        row = [ci(matrix[f].get(m)) + (" **oracle**" if per_family[f]["oracle"] == m else "") for f in families]
        used = compute(
            [s for f in families for s in scores.get((f, m), [])]
        )  # pooled over the families it ran on
        cost = " | ".join("—" if used[x] is None else f"{used[x]:.{0 if x == 'tokens' else 2}f}"
                          for x in ("executor_calls", "designer_calls", "tokens"))  # fmt: skip
        lines.append(f"| `{m}` | " + " | ".join(row) + f" | {pct(mix['methods'][m])} | {cost} |")
    lines += [
        "| per-family oracle | "
        + " | ".join(f"`{per_family[f]['oracle']}`" for f in families)
        + f" | {pct(mix['oracle'])} | — | — | — |",
        "",
        "## Per family",
        "",
        "| family | oracle (pattern) | oracle - sa | auto - sa | auto valid | auto share of oracle pattern | auto structures |",
        "|---|---|---|---|---|---|---|",
    ]
    for f, e in per_family.items():
        share = e.get("auto_oracle_pattern") or {}
        structs = ", ".join(f"{s} {100 * v:.0f}%" for s, v in (e.get("auto_structures") or {}).items())
        lines.append(
            f"| {f} | `{e['oracle']}` ({e['oracle_pattern']}) | {diff(e['oracle_minus_sa'])} | {diff(e.get('auto_minus_sa'))} "
            f"| {pct(share.get('valid_share'))} | {pct(share.get('share'))} | {structs or '—'} |"
        )
    lines += ["", "Every template against `sa` (avg@k points, paired bootstrap 95% CI):", ""]
    lines += ["| family | template | template - sa |", "|---|---|---|"]
    for f, e in per_family.items():
        for m, d in e["template_minus_sa"].items():
            lines.append(f"| {f} | `{m}` | {diff(d)} |")
    cross = mix["cross_fitted_minus_best_single"]
    lines += [
        "",
        "## Mixture (families weighted equally)",
        "",
        f"- best single method: `{mix['best_single']}` {pct(mix['methods'][mix['best_single']])}; per-family oracle "
        f"{pct(mix['oracle'])}: oracle - best single {diff(gap)}",
        f"- cross-fitted oracle (each family's method chosen on the other half of its tasks) "
        f"{pct(mix['cross_fitted_oracle'])}: - best single {diff(cross)}",
        "",
        "## Criteria (issue #42, item 1 and 3)",
        "",
        f"- families where a template beats `sa` by >= {GAIN_POINTS:.0f} points with a CI above 0 (need >= 2): "
        + (", ".join(f"{f} ({', '.join(ms)})" for f, ms in strong.items()) or "none"),
        "- best template per family: " + ", ".join(f"{f} `{m}`" for f, m in best_templates.items())
        + f" (differs: {criteria['best_template_differs_between_families']})",
        f"- families best served by a single agent: {', '.join(single) or 'none'}",
        f"- oracle - best single on the mixture: {100 * gap['diff']:+.1f} points (need >= {ORACLE_POINTS:.0f})",
        f"- cold-start designer's share of the oracle pattern per family (need <= {100 * SHARE_MAX:.0f}%): "
        + ", ".join(f"{f} {pct(s)}%" for f, s in shares.items()),
        "",
        "Programs run by `run_program` in the executions that printed an answer without an error: "
        + ", ".join(f"{f} {v['printed']}/{v['run_program_calls']}" for f, v in tool_runs.items() if v["run_program_calls"]),
        "",
        "Shortcuts refused by the reward (samples, per method): "
        + (", ".join(f"`{m}` {dict((n, c) for n, c in v.items() if c)}" for m, v in shortcuts.items()
                     if any(v.values())) or "none"),  # fmt: skip
    ]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
