"""``table.md`` in the layout of the paper's Table 1 and the self-contained ``report.html``.

Table 1 layout: one row per (model cell, method), one column per benchmark plus the average over
benchmarks, each cell the score in percent with the gain over the same cell's ``sa`` row in parentheses.
A ``*`` marks a number over fewer tasks than planned (a partial run).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from metaagent.records import RolloutTree

from .html import benchmark_plot, figure, img, png, table, write_page
from .html import escape as e
from .methods import BEST, SA


def _rows(results: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(cell, method, {benchmark: entry}) in display order: sa first, auto last."""
    order = {SA: 0, "auto": 2}
    out = []
    for cell, c in results["cells"].items():
        methods = list(dict.fromkeys(m for b in c["benchmarks"].values() for m in b))
        for m in sorted(methods, key=lambda m: (order.get(m, 1), results["methods"].index(m))):
            out.append((cell, m, {b: c["benchmarks"].get(b, {}).get(m) for b in results["benchmarks"]}))
    return out


def signed(x: float, digits: int = 1) -> str:
    """``x`` with its sign, rounded; a difference that rounds to zero reads ``+0.00``, never ``-0.00``."""
    r = round(x, digits)
    return f"{r if r != 0 else 0.0:+.{digits}f}"


def shortcut_cell(counts: dict[str, int] | None) -> str:
    """The samples the reward refused as shortcuts, per class (``0`` for none; ``—`` for records that predate
    the counters)."""
    if counts is None:
        return "—"
    found = [f"{name} {n}" for name, n in counts.items() if n]
    return ", ".join(found) or "0"


def _value(entry: dict[str, Any] | None, metric: str) -> float | None:
    if not entry:
        return None
    m = entry["metrics"].get(metric)
    return None if m is None or m["mean"] is None else 100.0 * m["mean"]


#: the compute columns of every table: (header, budget key of a summary), per sample (mean)
COMPUTE_COLUMNS = (
    ("exec calls/sample", "agent_calls_per_sample"),
    ("designer calls/sample", "designer_calls_per_sample"),
    ("tokens/sample", "tokens_per_sample"),
)


def compute_cells(entries: Sequence[dict[str, Any] | None]) -> list[str]:
    """A row's compute per sample over its benchmarks (weighted by samples): executor calls, designer calls
    and
    generated tokens (designer + agents), formatted; ``—`` where nothing was sampled."""
    present = [en for en in entries if en and en.get("samples")]
    samples = sum(en["samples"] for en in present)
    out = []
    for _, key in COMPUTE_COLUMNS:
        if not samples:
            out.append("—")
            continue
        value = sum(en["budget"].get(key, 0.0) * en["samples"] for en in present) / samples
        out.append(f"{value:.0f}" if key == "tokens_per_sample" else f"{value:.2f}")
    return out


def method_label(method: str, entries: Sequence[dict[str, Any] | None]) -> str:
    """The method as the tables name it: ``sa@=<method>`` with the k it ran with on each benchmark (``k=3``,
    or
    ``k=2/3`` per benchmark in column order when they differ)."""
    ks = [en["k"] for en in entries if en and en.get("k") is not None]
    if not ks:
        return method
    return f"{method} (k={ks[0]})" if len(set(ks)) == 1 else f"{method} (k={'/'.join(str(k) for k in ks)})"


def metric_table(results: dict[str, Any], metric: str) -> str:
    """One markdown table of ``metric`` (e.g. ``avg@3``) in the Table 1 layout, with each row's compute per
    sample (:data:`COMPUTE_COLUMNS`, mean over its benchmarks)."""
    benches = results["benchmarks"]
    head = (
        "| Model | Method | "
        + " | ".join(benches)
        + " | Avg | "
        + " | ".join(h for h, _ in COMPUTE_COLUMNS)
        + " |\n"
    )
    head += "|---|---|" + "---:|" * (len(benches) + 1 + len(COMPUTE_COLUMNS)) + "\n"
    lines = []
    base: dict[str, dict[str, float | None]] = {}
    for cell, method, entries in _rows(results):
        if method == SA:
            base[cell] = {b: _value(entries[b], metric) for b in benches}
    for cell, method, entries in _rows(results):
        vals = {b: _value(entries[b], metric) for b in benches}
        cells = []
        for b in benches:
            v = vals[b]
            if v is None:
                cells.append("—")
                continue
            ref = base.get(cell, {}).get(b)
            star = "" if entries[b] and entries[b]["complete"] else "*"
            gain = f" ({signed(v - ref, 2)})" if ref is not None else ""
            cells.append(f"{v:.2f}{gain}{star}")
        present = [vals[b] for b in benches if vals[b] is not None]
        avg = fmean(present) if len(present) == len(benches) and present else None
        ref_vals = [base.get(cell, {}).get(b) for b in benches]
        ref_avg = fmean(ref_vals) if all(v is not None for v in ref_vals) and ref_vals else None  # type: ignore[arg-type]
        if avg is None:
            cells.append("—")
        else:
            cells.append(f"{avg:.2f}" + (f" ({signed(avg - ref_avg, 2)})" if ref_avg is not None else ""))
        cells += compute_cells([entries[b] for b in benches])
        label = method_label(method, [entries[b] for b in benches])
        lines.append(f"| {cell} | {label} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def render_table(results: dict[str, Any]) -> str:
    """``table.md``: avg@k (main), pass@k and maj@k tables, CIs, budgets and the partial-run note."""
    k = results["k_main"]
    cfg = results["config"]
    out = [
        "# Evaluation results" + ("" if results["complete"] else " (PARTIAL: some tasks not run yet)"),
        "",
        f"Scores in %, mean over tasks; parentheses: gain over `sa` of the same model. n = {cfg['n']} samples "
        f"per task, seed {cfg['seed']}, temperature {cfg['temperature']}."
        + ("" if results["complete"] else " `*`: over fewer tasks than planned.")
        + " Compute per sample (mean): executor calls (agent turns), designer calls, generated tokens"
        " (designer + agents); an `sa@k` sample is one answer from k executions, so it costs k executions'"
        " compute.",
        "",
        f"## avg@{k} (Table 1 layout)",
        "",
        metric_table(results, f"avg@{k}"),
    ]
    for designer, executor, bench, method in results.get("pending", []):
        match = method.split("=", 1)[-1] if "=" in method else method.split("@", 1)[-1]
        cell = f"{designer} -> {executor}"
        out.append(f"`{method}` on {bench} ({cell}): not run yet, its k waits for `{match}`.\n")
    for metric in [f"pass@{x}" for x in results["ks"]] + [f"maj@{k}"]:
        if any(_value(en, metric) is not None for _, _, es in _rows(results) for en in es.values()):
            out += [f"## {metric}", "", metric_table(results, metric)]
    out += ["## 95% bootstrap CIs and budgets", ""]
    out.append(
        f"| Model | Method | Benchmark | tasks | avg@{k} [95% CI] | pass@{k} [95% CI] | tokens/task | agent calls/task "
        "| "
        + " | ".join(h for h, _ in COMPUTE_COLUMNS)
        + " | valid scripts | reward errors | shortcuts refused |"
    )
    out.append("|---|---|---|---:|---|---|---:|---:|" + "---:|" * len(COMPUTE_COLUMNS) + "---:|---:|---|")
    for cell, method, entries in _rows(results):
        for b, en in entries.items():
            if not en:
                continue

            def ci(metric: str, en: dict[str, Any] = en) -> str:
                m = en["metrics"].get(metric)
                if not m or m["mean"] is None:
                    return "—"
                lo, hi = m["ci95"]
                return f"{100 * m['mean']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"

            valid = en["valid_script_rate"]
            out.append(
                f"| {cell} | {method_label(method, [en])} | {b} | {en['tasks']}/{en['tasks_planned']} "
                f"| {ci(f'avg@{k}')} | {ci(f'pass@{k}')} "
                f"| {en['budget']['tokens_per_task']:.0f} | {en['budget']['agent_calls_per_task']:.1f} "
                f"| {' | '.join(compute_cells([en]))} "
                f"| {'—' if valid is None else f'{100 * valid:.0f}%'} | {en['reward_errors']} "
                f"| {shortcut_cell(en.get('shortcuts'))} |"
            )
    out += best_section(results)
    out += _structure_section(results)
    out += _grid_section(results)
    cmps = [c for c in results["comparisons"] if c.get("diff") is not None]
    if cmps:
        out += ["", f"## Paired comparisons (B - A, {cmps[0]['metric']}, paired bootstrap)", ""]
        out.append("| A | B | benchmark | tasks | diff [95% CI] | only B: same / different structure | only A |")
        out.append("|---|---|---|---:|---|---|---:|")
        for c in cmps:
            lo, hi = c["ci95"]
            out.append(
                f"| {c['a'][0]} / {c['a'][2]} | {c['b'][0]} / {c['b'][2]} | {c['a'][1]} | {c['tasks']} "
                f"| {signed(100 * c['diff'])} [{signed(100 * lo)}, {signed(100 * hi)}] "
                f"| {c['only_b']}: {c['only_b_same_structure']} / {c['only_b_different_structure']} | {c['only_a']} |"
            )
    return "\n".join(out) + "\n"


def best_section(results: dict[str, Any]) -> list[str]:
    """best-per-domain's choice per (model, benchmark, domain): the chosen candidate and every candidate's
    mean
    avg@k on the selection split (the split it was chosen on, never the one it is scored on)."""
    rows = []
    split = "val"
    for cell, c in results["cells"].items():
        for b, methods in c["benchmarks"].items():
            en = methods.get(BEST)
            if not en:
                continue
            split = en.get("selection_split", split)
            for domain, sel in en["selection"].items():
                scored = ", ".join(
                    f"{m} {100 * v:.1f}" for m, v in sel["val"].items() if v is not None
                ) or sel.get("note", "—")
                rows.append(
                    f"| {cell} | {b} | {domain} | {sel['chosen'] or '—'} | {sel['val_tasks']} | {scored} |"
                )
    if not rows:
        return []
    return [
        "",
        f"## best-per-domain: the candidate chosen per domain on split `{split}` (avg@{results['k_main']} %)",
        "",
        f"| Model | Benchmark | domain | chosen | {split} tasks | candidates on {split} |",
        "|---|---|---|---|---:|---|",
        *rows,
    ]


def _structure_section(results: dict[str, Any]) -> list[str]:
    """Table 6 / 9 / App. C: what ``auto``'s designer built, per model and benchmark."""
    rows = []
    for cell, c in results["cells"].items():
        for b, methods in c["benchmarks"].items():
            d = (methods.get("auto") or {}).get("designs")
            if not d or not d["workflows"]:
                continue
            fam = d["structure_share"]["family"]
            u = d["system_prompts"]["unique_share"]
            rows.append(
                f"| {cell} | {b} | {d['workflows']} | "
                + " | ".join(f"{100 * fam.get(x, 0.0):.1f}" for x in ("single", "reflection", "ensemble", "other"))
                + f" | {d['roles']['distinct']} | {', '.join(n for n, _ in d['roles']['top'][:5]) or '—'} | "
                + ("—" if u is None else f"{100 * u:.1f}")
                + " |"
            )
    if not rows:
        return []
    return [
        "",
        "## Structures of auto's valid designs (Table 6 / 10: family share %; Table 9: roles; App. C: unique prompts %)",
        "",
        "| Model | Benchmark | workflows | single | reflection | ensemble | other | distinct roles | top roles | unique prompts |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
        *rows,
    ]


def _grid_section(results: dict[str, Any]) -> list[str]:
    """The co-evolution grid: auto's avg@k, designer checkpoints (rows) x executor checkpoints (columns)."""
    grid = results.get("grid")
    if not grid:
        return []
    out = ["", f"## Co-evolution grid (auto, avg@{results['k_main']} %; rows: designer, columns: executor)"]
    for bench, rows in grid["benchmarks"].items():
        out += ["", f"### {bench}", "", "| designer \\ executor | " + " | ".join(grid["executors"]) + " |"]
        out.append("|---|" + "---:|" * len(grid["executors"]))
        for d, row in zip(grid["designers"], rows):
            out.append(f"| {d} | " + " | ".join("—" if v is None else f"{100 * v:.2f}" for v in row) + " |")
    return out


# ---- HTML ------------------------------------------------------------------------------------------------


def score_plot(results: dict[str, Any], metric: str) -> bytes | None:
    """Grouped bars: ``metric`` per benchmark, one bar per (cell, method), with 95% CI whiskers."""
    rows = _rows(results)
    benches = results["benchmarks"]
    if not rows or not benches:
        return None
    fig, ax = figure((8.0, 3.4))
    width = 0.8 / len(rows)
    for i, (cell, method, entries) in enumerate(rows):
        xs, ys, err = [], [], [[], []]
        for j, b in enumerate(benches):
            m = (entries[b] or {}).get("metrics", {}).get(metric)
            if not m or m["mean"] is None:
                continue
            xs.append(j - 0.4 + width * (i + 0.5))
            ys.append(100 * m["mean"])
            err[0].append(100 * (m["mean"] - m["ci95"][0]))
            err[1].append(100 * (m["ci95"][1] - m["mean"]))
        if xs:
            ax.bar(xs, ys, width=width, yerr=err, capsize=2, label=f"{cell} / {method}")
    ax.set_xticks(range(len(benches)))
    ax.set_xticklabels(benches, fontsize=8)
    ax.set_ylabel(f"{metric} (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return png(fig)


def render_html(
    results: dict[str, Any], trees: Sequence[RolloutTree], out: str | os.PathLike[str], *, max_tasks: int = 20
) -> Path:
    """Write the self-contained HTML report of an evaluation (tables, plots, structures, comparisons)."""
    title = f"metaagent-eval — {results['run_id']}" + ("" if results["complete"] else " (partial)")
    body = [
        f"<h1>{e(title)}</h1>",
        _html_setup(results),
        *_html_scores(results),
        *_html_budgets(results),
        *_html_designs(results),
        *_html_comparisons(results),
        _task_grid(results, trees, max_tasks),
    ]
    return write_page(out, title, body)


def _html_setup(results: dict[str, Any]) -> str:
    """The run's models, methods, benchmarks, sampling settings and versions."""
    cfg = results["config"]
    return table(
        ["", ""],
        [
            ("models", e(", ".join(results["cells"]))),
            ("methods", e(", ".join(results["methods"]))),
            ("benchmarks", e(", ".join(results["benchmarks"]))),
            ("samples / budgets", e(f"n = {cfg['n']}, k = {results['ks']}")),
            ("seed / temperature", e(f"{cfg['seed']} / {cfg['temperature']}")),
            ("versions", e(", ".join(f"{a} {b}" for a, b in results["versions"].items()))),
        ],
    )


def _html_scores(results: dict[str, Any]) -> list[str]:
    """The avg@k table (gain over sa) and the avg@k / pass@k plots per benchmark."""
    k = results["k_main"]
    body = [f"<h2>Scores (avg@{k}, %; gain over sa)</h2>"]
    body.append(_md_table_html(metric_table(results, f"avg@{k}")))
    body.append(img(score_plot(results, f"avg@{k}"), f"avg@{k} per benchmark with 95% CI"))
    if k > 1:
        body.append(img(score_plot(results, f"pass@{k}"), f"pass@{k} per benchmark with 95% CI"))
    return body


def _html_budgets(results: dict[str, Any]) -> list[str]:
    """Per (model, method, benchmark): tasks done, token and call budgets, valid scripts, execution status."""
    rows = []
    for cell, method, entries in _rows(results):
        for b, en in entries.items():
            if en:
                st = en["exec_status"]
                rows.append(
                    (
                        e(cell), e(method_label(method, [en])), e(b), f"{en['tasks']}/{en['tasks_planned']}",
                        f"{en['budget']['tokens_per_task']:.0f}", f"{en['budget']['agent_calls_per_task']:.1f}",
                        *compute_cells([en]),
                        "—" if en["valid_script_rate"] is None else f"{100 * en['valid_script_rate']:.0f}%",
                        e(", ".join(f"{s} {n}" for s, n in st.items() if n)), str(en["reward_errors"]),
                        e(shortcut_cell(en.get("shortcuts"))),
                    )
                )
    return [
        "<h2>Budgets, validity, execution status</h2>",
        table(
            [
                "model",
                "method",
                "benchmark",
                "tasks",
                "tokens/task",
                "agent calls/task",
                *(h for h, _ in COMPUTE_COLUMNS),
                "valid scripts",
                "status",
                "reward errors",
                "shortcuts refused",
            ],
            rows,
            [3, 4, 5, 6, 7, 8, 9, 11],
        ),
    ]


def _html_designs(results: dict[str, Any]) -> list[str]:
    """The structures, roles and system prompts the designer chose (auto method), per model and benchmark."""
    body = ["<h2>Structures the designer chose (Table 6 / 10), roles (Table 9), prompts (App. C)</h2>"]
    for cell, c in results["cells"].items():
        shares = {b: m["auto"]["designs"]["structure_share"]["family"] for b, m in c["benchmarks"].items() if "auto" in m}
        if not shares:
            continue
        body.append(f"<h3>{e(cell)} / auto</h3>")
        body.append(img(benchmark_plot(shares, f"{cell}: structure family share"), "structure share per benchmark"))
        for b, m in c["benchmarks"].items():
            if "auto" not in m:
                continue
            d = m["auto"]["designs"]
            top = ", ".join(f"{n} ({c_})" for n, c_ in d["roles"]["top"]) or "—"
            u = d["system_prompts"]["unique_share"]
            body.append(
                f"<p><b>{e(b)}</b>: {d['workflows']} valid workflows; patterns "
                f"{e(', '.join(f'{x} {100 * y:.0f}%' for x, y in d['structure_share']['pattern'].items()) or '—')}; "
                f"{d['roles']['distinct']} distinct roles, top: {e(top)}; byte-unique system prompts: "
                f"{'—' if u is None else f'{100 * u:.1f}%'}</p>"
            )
    return body


def _html_comparisons(results: dict[str, Any]) -> list[str]:
    """The paired comparisons with a difference (B − A, bootstrap CI); nothing when there are none."""
    cmps = [c for c in results["comparisons"] if c.get("diff") is not None]
    if not cmps:
        return []
    return [
        "<h2>Paired comparisons (B − A, paired bootstrap 95% CI; App. C split)</h2>",
        table(
            ["A", "B", "benchmark", "tasks", "diff", "95% CI", "only B (same / different structure)", "only A"],
            [
                (
                    e(f"{c['a'][0]} / {c['a'][2]}"), e(f"{c['b'][0]} / {c['b'][2]}"), e(c["a"][1]), str(c["tasks"]),
                    f"{signed(100 * c['diff'])}", f"[{signed(100 * c['ci95'][0])}, {signed(100 * c['ci95'][1])}]",
                    f"{c['only_b']} ({c['only_b_same_structure']} / {c['only_b_different_structure']})", str(c["only_a"]),
                )
                for c in cmps
            ],
            [3, 4, 7],
        ),
    ]


def _md_table_html(md: str) -> str:
    lines = [ln for ln in md.strip().splitlines() if ln.startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    head, rows = cells[0], cells[2:]
    return table(head, [[e(c) for c in r] for r in rows], list(range(2, len(head))))


def _task_grid(results: dict[str, Any], trees: Sequence[RolloutTree], max_tasks: int) -> str:
    """Per task: the correct samples of each (cell, method), and the answer and structure of each."""
    if max_tasks <= 0:
        return ""
    rows = _rows(results)
    tasks: dict[str, dict[str, str]] = {}
    for cell, method, entries in rows:
        for b, en in entries.items():
            for t in (en or {}).get("per_task", []):
                tasks.setdefault(t["task_id"], {"benchmark": b})[f"{cell} / {method}"] = (
                    f"{t['c']}/{t['n']}" + (f" {t['structure']}" if t["structure"] and method == "auto" else "")
                )
    cols = [f"{cell} / {method}" for cell, method, _ in rows]
    ids = list(tasks)[:max_tasks]
    out = f"<h2>Tasks (correct/scored samples; first {len(ids)} of {len(tasks)})</h2>"
    out += '<p class="dim">replay any task: <code>metaagent-replay OUT --task ID</code></p>'
    out += table(["task", "benchmark", *cols], [[e(i), e(tasks[i]["benchmark"]), *(e(tasks[i].get(c, "—")) for c in cols)] for i in ids])
    return out
