"""Co-evolution v2 (issue #42, item 4): the suite cold start trained on the structure-sensitive suite in each
schedule mode, with a paired frozen baseline, the designer's choice of each family's oracle structure step by
step, and a held-out table against ``sa``, the best single template and the per-family oracle.

    .venv/bin/python benchmarks/coevolution_v2.py                # start, or continue where it stopped
    .venv/bin/python benchmarks/coevolution_v2.py --report-only  # rewrite the figures from what exists

The machinery is v1's (``benchmarks/coevolution_cpu.py``, imported): each mode runs ``train-metaagent`` from
``--model`` (default ``embedded-sft-suite``) with the same seed and task stream, ``--chunk`` steps at a time,
``--jobs`` (default 2) modes at once (a free job takes the mode with the fewest steps), resumed from its newest
checkpoint (``--resume`` is implied);
``frozen`` is the trainer's schedule mode of that name (no role trained, no update: the paired baseline). The
held-out evaluations share the ``--jobs``: a job with no mode to train evaluates the next mode that has its
steps (the start model first, then ``--modes`` order).
What v2 adds is the suite preset (:func:`suite_overrides`: the suite's train split of ``--families``, B
``--batch-size`` tasks a step with the math families and code drawn in proportion to their count, M
``--designs``, N ``--executions``, the matrix's token limits; ``--domain-hint off``: ``rollout.domain_hint=off``,
issue 62's designer prompt without ``Task domain: <domain>.``, and every held-out ``metaagent-eval`` with
``--domain-hint off``, the start model's included; the default ``on`` adds nothing, so the committed runs keep
their meaning: ``auto``, the suite cold start's record, which is on) and the report:

- ``--oracle`` (default the structure matrix's ``matrix.json``) names each family's oracle (the best of ``sa`` and
  the fixed templates), its pattern, and the best single method on the mixture; when the matrix names another
  oracle, rerunning the script evaluates it held-out (the evaluations resume, keeping every finished record);
- ``curves.png``: per mode, smoothed over ``--smooth`` steps, designer reward (Eq. 4), executor reward,
  valid-script rate, shortcut executions per step (``reward/shortcut/*``), and per family the share of the
  designer's valid designs whose pattern is the family's oracle pattern (from the rollout records of each step);
  designer stages of the stagewise run shaded;
- ``table.md``: the training table, the slope of each family's oracle share over the designer-trained steps,
  each family's single-agent share over the first and last 10 steps (a drift to one agent raises every family's)
  and its most written pattern over the last 5 steps,
  per family the count, mean design reward and mean advantage of each pattern the designer wrote,
  v1's role slopes and paired gains over ``frozen``, the shortcut counters, and the held-out table: each final
  checkpoint's ``auto`` (and the start model's) on the suite's test split of every family (``--eval-limit`` tasks,
  ``--eval-n`` samples) against ``sa``, the best single method and the oracle, run with the same checkpoint as
  executor (paired bootstrap CIs over tasks), and against the start model's ``auto`` with App. C's split of the
  tasks only the trained model solves into executor gain (same structure) and designer flip;
- ``STATUS.md``: the command, the steps each mode has, seconds per step so far and the time left at that rate;
- ``--modes ... sa_grpo`` (issue 61) trains the RL-trained single agent beside the designer modes:
  ``executor_only`` with the designer frozen to each domain's single-agent script and M x N executions of one
  design (the designer runs' executor rollouts per question; ``configs/sa_grpo_suite.yaml`` is the
  same
  run); ``--baselines`` adds ``sa@auto`` (or ``sa@<--sa-k>``), ``fixed:pot`` and ``best-per-domain`` (chosen
  on the
  suite's val split among ``sa``, ``fixed:pot`` and the matrix's templates) to every held-out evaluation; a
  ``--seed`` other than 0 with the default ``--runs`` / ``--results`` gets folders of its own
  (``..._seed<S>``), and so does ``--domain-hint off`` (``..._nohint``: never resuming checkpoints trained with
  the hint; ``benchmarks/evidence.py --domain-hint off`` needs a ``--runs`` of its own);
- ``metrics_<mode>.jsonl.xz`` (each run's metrics) and ``heldout/<mode>/`` (the evaluation records and
  summaries, compressed; ``metaagent-replay`` opens them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from metaagent.lazy import import_file
from metaagent.policy.precision import resolve_dtype

# benchmarks/ is not a package: the scripts load each other from their files
v1 = import_file(Path(__file__).with_name("coevolution_cpu.py"), "coevolution_cpu")
structure_matrix = import_file(Path(__file__).with_name("structure_matrix.py"), "structure_matrix")

ROOT = v1.ROOT
DEFAULT_MODES = (v1.FROZEN, "designer_only", "stagewise", "coupled")
#: sa+grpo (issue 61): the trainer's executor_only with the designer frozen to each domain's single-agent
#: script and
#: the designer runs' M x N executions of a question as one group (configs/sa_grpo_suite.yaml)
SA_GRPO = "sa_grpo"
MODES = (*v1.MODES, SA_GRPO)
ORACLE = "benchmarks/results/structure_matrix/matrix.json"
#: seconds a training step of the default size is expected to take on the shared 2-core host before any is
#: measured: v1's bf16 steps (B = 2, M = N = 2: 8 executions, 4 designs) took 25.5-35.0 s
#: (coevolution_cpu_integrity_v2/STATUS.md); v2's (B = 4, M = 4, N = 2: 32 executions, 16 designs of up to 384
#: tokens) generate about 4x as much
V1_STEP_S = (25.5, 35.0)
PRIOR_STEP_S = 4 * sum(V1_STEP_S) / 2
#: seconds each chunk adds outside its steps (a trainer process starts, loads the model, writes a checkpoint):
#: 45 s measured with the tiny model on the busy host (a 1-step chunk: 49 s wall, 4 s step); more for the
#: embedded model, whose checkpoint with AdamW moments is ~1.6 GB
PRIOR_CHUNK_S = 60.0
#: held-out (family, method, task) records a minute, n = 4: the structure matrix's rate with the same model and
#: sampling on an idle 2-core host (structure_matrix/STATUS.md)
EVAL_RECORDS_PER_MIN = (4.6, 10.0)


@dataclass(frozen=True)
class Oracle:
    """What the structure matrix says about each family: its oracle method and pattern, the methods it ran."""

    path: Path
    methods: dict[str, str]  # family -> oracle method (sa or fixed:<template>)
    patterns: dict[str, str]  # family -> the oracle's pattern (workflow.analysis)
    ran: dict[str, set[str]]  # family -> methods the matrix ran there
    best_single: str  # the best single method on the mixture
    means: dict[str, dict[str, float]] = field(default_factory=dict)  # family -> method -> the matrix's mean

    @classmethod
    def read(cls, path: str | Path) -> Oracle:
        path = Path(path)
        if not path.is_file():
            raise SystemExit(f"oracle file {path} does not exist; run benchmarks/structure_matrix.sh or pass --oracle")
        data = json.loads(path.read_text())
        fams = data["per_family"]
        means = {f: {m: e["mean"] for m, e in row.items() if isinstance(e, dict) and "mean" in e}
                 for f, row in data["matrix"].items()}  # fmt: skip
        return cls(path, {f: e["oracle"] for f, e in fams.items()}, {f: e["oracle_pattern"] for f, e in fams.items()},
                   {f: set(m) for f, m in data["matrix"].items()}, data["mixture"]["best_single"], means)  # fmt: skip

    def eval_methods(self, family: str) -> tuple[str, ...]:
        """``auto``, ``sa``, the family's oracle, and the best single method where the matrix ran it."""
        wanted = ["auto", "sa", self.methods[family]]
        if self.best_single in self.ran.get(family, ()):
            wanted.append(self.best_single)
        return tuple(dict.fromkeys(wanted))


def suite_overrides(args: argparse.Namespace) -> list[str]:
    """train-metaagent overrides of the suite preset (before the user's own, which win)."""
    from metaagent.data.suite import family_source

    def spec(split: str) -> str:
        return "[" + ", ".join(f"{{source: {family_source(f)}, split: {split}}}" for f in args.families) + "]"

    weights = {"math": sum(1 for f in args.families if f != "code"), "code": args.families.count("code")}
    mix = "{" + ", ".join(f"{d}: {n}" for d, n in weights.items() if n) + "}"  # one weight a family
    return [f"data.train={spec('train')}", f"data.val={spec('val')}", f"data.batch_size={args.batch_size}",
            f"data.mix={mix}", f"rollout.m_designs={args.designs}", f"rollout.n_executions={args.executions}",
            f"rollout.designer.max_tokens={args.designer_max_tokens}",
            f"rollout.executor.max_tokens={args.executor_max_tokens}",
            *(["rollout.domain_hint=off"] if no_hint(args) else [])]  # fmt: skip


def no_hint(args: argparse.Namespace) -> bool:
    """``--domain-hint off`` (issue 62): the designer prompt without ``Task domain: <domain>.``."""
    return getattr(args, "domain_hint", "on") == "off"


def recipes(args: argparse.Namespace) -> dict[str, tuple[str, list[str]]]:
    """Recipe modes: mode -> (the trainer's schedule mode, overrides after the suite preset's). ``sa_grpo``:
    the
    frozen single-agent designer and N = M x N executions of one design, so a step sees the designer runs'
    number
    of executor rollouts per question (the budget of ``configs/sa_grpo_suite.yaml``)."""
    n = args.designs * args.executions
    frozen = ["rollout.frozen_designer=sa", "rollout.m_designs=1", f"rollout.n_executions={n}"]
    return {SA_GRPO: ("executor_only", frozen)}


def baseline_methods(args: argparse.Namespace, oracle: Oracle, family: str) -> tuple[str, ...]:
    """``--baselines``: issue 61's equal-compute baselines beside a family's held-out methods: ``sa@k`` (k
    from the
    checkpoint's own ``auto``, or ``--sa-k``), ``fixed:pot`` (answer families) and ``best-per-domain`` over
    the
    methods the structure matrix ran on the family (chosen on the suite's val split)."""
    if not args.baselines:
        return ()
    out = [f"sa@{args.sa_k}" if args.sa_k else "sa@auto", "best-per-domain"]
    return (*out, "fixed:pot") if family != "code" else tuple(out)


def best_of(oracle: Oracle, family: str, top: int = 0) -> tuple[str, ...]:
    """best-per-domain's candidates on ``family``: ``sa``, ``fixed:pot`` (answer families) and the matrix's
    fixed templates there, sorted (``auto`` is what is judged, never a candidate). ``top`` > 0 keeps only the
    matrix's ``top`` best fixed templates on the family (its start-model means; ``--best-of-top``): fewer
    candidates to run on val and test, and a pre-selection that can only favour the baseline."""
    ran = {m for m in oracle.ran.get(family, ()) if m == "sa" or m.startswith("fixed:")}
    if top:
        fixed = sorted((m for m in ran if m.startswith("fixed:")), key=lambda m: -oracle.means.get(family, {}).get(m, 0.0))
        ran = set(fixed[:top])
    return tuple(sorted(ran | {"sa"} | (set() if family == "code" else {"fixed:pot"})))


def sa_grpo_methods(args: argparse.Namespace) -> tuple[str, ...]:
    """``--sa-grpo-ks``: the sa+grpo checkpoint's held-out methods, ``sa`` and ``sa@k`` for each k (the report
    pairs a designer checkpoint's ``auto`` with the sa@k of the least k at or above its executor calls)."""
    return ("sa", *(f"sa@{k}" for k in args.sa_grpo_ks))


def heldout_dir(args: argparse.Namespace, mode: str) -> Path:
    return Path(args.runs) / f"heldout_{mode}"


def evaluations(args: argparse.Namespace, oracle: Oracle, mode: str) -> list:
    """Held-out: one ``metaagent-eval`` run per family (its oracle and the best single method differ), as calls
    for :func:`v1.train_round_robin`'s ``evals``."""

    def one(family: str) -> None:  # sandbox workers and tasks in flight: metaagent-eval's auto
        if mode == SA_GRPO and args.sa_grpo_ks:  # the RL-trained single agent: one agent, alone or k times
            methods, extra = sa_grpo_methods(args), ()
        else:
            methods = (*oracle.eval_methods(family), *baseline_methods(args, oracle, family))
            extra = ("--best-of", *best_of(oracle, family, args.best_of_top)) if args.baselines else ()
        v1.evaluate(args, mode, benchmarks=(f"suite_{family}:test",), methods=methods,
                    out=heldout_dir(args, mode) / "evals" / family,
                    extra=("--dtype", args.dtype, *extra))  # fmt: skip

    return [lambda family=family: one(family) for family in args.families]


# ---- per-step structure ---------------------------------------------------------------------------------------


def step_trees(folder: Path) -> list[tuple[int, list]]:
    """(step, the step's rollout trees) for every rollout record of a run, in step order."""
    from metaagent.records import glob_records, read_trees

    out = []
    for path in glob_records(folder / "rollouts", "step_*.jsonl"):
        trees, _ = read_trees(path)
        if trees:
            out.append((trees[0].step, trees))
    return sorted(out, key=lambda st: st[0])


def family_of(tree) -> str | None:
    return (tree.task.get("metadata") or {}).get("family")


def pattern_shares(steps: list[tuple[int, list]], patterns: dict[str, str]) -> dict[str, list[tuple[int, float]]]:
    """family -> (step, share of the step's valid designs on that family's tasks whose pattern is
    ``patterns[family]``); a step without a valid design of the family has no point."""
    from metaagent.eval.matrix import pattern_share

    out: dict[str, list[tuple[int, float]]] = {f: [] for f in patterns}
    for step, trees in steps:
        for family, pattern in patterns.items():
            share = pattern_share([t for t in trees if family_of(t) == family], pattern)["share"]
            if share is not None:
                out[family].append((step, share))
    return out


#: the pattern of a one-agent design (workflow.analysis)
SINGLE = "single"
#: the label of a design whose script failed the checks (it has no pattern)
INVALID = "(invalid)"


def modal_patterns(steps: list[tuple[int, list]], families: list[str], last: int = 5) -> dict[str, str]:
    """family -> its most written pattern among the valid designs of the ``last`` steps, with its share
    (``"tool-pair 0.90"``; ``"-"`` without a valid design): what the designer ends up choosing per family."""
    by_family = pattern_designs(steps[-last:])
    out = {}
    for f in families:
        counts = {p: len(designs) for p, designs in by_family.get(f, {}).items() if p != INVALID}
        top = max(counts, key=counts.__getitem__, default=None)  # ties: the first written
        out[f] = f"{top} {counts[top] / sum(counts.values()):.2f}" if top else "-"
    return out


def pattern_designs(steps: list[tuple[int, list]]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """family -> pattern (``INVALID`` for a design that failed the checks) -> (reward, advantage) of each of its
    designs over every step of a run: the design's reward (Eq. 4, the mean of its executions' rewards) and its
    designer advantage (its reward against the other designs of the same task, computed in every mode)."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for _, trees in steps:
        for t in trees:
            for d in t.designs:
                pattern = (d.structure or {}).get("pattern") if d.valid else INVALID
                out.setdefault(family_of(t), {}).setdefault(str(pattern), []).append((d.reward, d.advantage))
    return out


def pattern_section(families: list[str], modes: list[str], by_mode: dict[str, dict]) -> list[str]:
    """Per family: each pattern's designs per mode (count, mean design reward, mean designer advantage)."""
    lines = [
        "Designs by pattern: what the designer's gradient sees. Per family, the designs of each pattern over all",
        "steps of a mode: count (mean design reward, mean designer advantage). A design's reward is the mean of",
        "its executions' R = R_correct + 0.4 R_format (0.4: a well-formed wrong answer, 1.4: a right one); its",
        "advantage compares it with the other designs of the same task. The designer's update moves each pattern",
        "by about count x mean advantage, so a pattern sampled often with a small advantage can outgrow a rarer",
        "one with a large advantage. The oracle pattern is the best *fixed template* of the structure matrix,",
        "which need not be the best pattern the designer itself writes.",
        "",
    ]
    for f in families:
        counts: dict[str, int] = {}
        for m in modes:
            for pattern, designs in by_mode.get(m, {}).get(f, {}).items():
                counts[pattern] = counts.get(pattern, 0) + len(designs)
        rows = []
        for pattern in sorted(counts, key=lambda p: -counts[p]):
            cells = []
            for m in modes:
                designs = by_mode.get(m, {}).get(f, {}).get(pattern, [])
                rewards, advantages = [r for r, _ in designs], [a for _, a in designs]
                cells.append(f"{len(designs)} ({v1.mean(rewards):.2f}, {v1.mean(advantages):+.2f})" if designs else "0")
            rows.append(f"| {pattern} | " + " | ".join(cells) + " |")
        lines += [f"{f}:", "", *family_table("pattern", modes, rows)]
    return lines


def shortcut_series(rows: list[dict]) -> list[tuple[int, float]]:
    """(step, executions refused as a shortcut, all classes) for the steps that log the counters."""
    from metaagent.rewards.shortcuts import SHORTCUT_CLASSES

    keys = [f"reward/shortcut/{name}" for name in SHORTCUT_CLASSES]
    return [(r["step"], float(sum(r.get(k, 0) for k in keys))) for r in rows if r.get("step", -1) >= 0 and keys[0] in r]


# ---- held-out -------------------------------------------------------------------------------------------------


def family_values(scores, family: str, method: str, k: int) -> dict[str, float]:
    """task id -> avg@k of ``method`` on ``family``'s tasks (empty when it was not run there)."""
    from metaagent.eval.matrix import values

    return values(scores.get((family, method), ()), "avg", k)


def heldout_values(scores, oracle: Oracle, families, k: int) -> dict[str, dict[str, float]]:
    """Per-task avg@k of ``auto``, ``sa``, the oracle and the best single method (0 on a family where the
    matrix did not run it, as in the matrix's mixture), pooled over the families."""
    out: dict[str, dict[str, float]] = {"auto": {}, "sa": {}, "oracle": {}, "best single": {}}
    for f in families:
        auto = family_values(scores, f, "auto", k)
        out["auto"].update(auto)
        out["sa"].update(family_values(scores, f, "sa", k))
        out["oracle"].update(family_values(scores, f, oracle.methods[f], k))
        ran = oracle.best_single in oracle.ran.get(f, ())
        out["best single"].update(family_values(scores, f, oracle.best_single, k) if ran else dict.fromkeys(auto, 0.0))
    return out


def diff_text(a: dict[str, float], b: dict[str, float]) -> str:
    """``b - a`` in points over the tasks both have, with its paired bootstrap 95% CI."""
    from metaagent.eval.metrics import paired_bootstrap_ci
    from metaagent.eval.report import signed

    common = sorted(set(a) & set(b))
    if not common:
        return "-"
    d, lo, hi = paired_bootstrap_ci([a[t] for t in common], [b[t] for t in common])
    return f"{signed(100 * d)} [{signed(100 * lo)}, {signed(100 * hi)}] ({len(common)})"


def heldout_section(args: argparse.Namespace, oracle: Oracle) -> list[str]:
    from metaagent.eval.matrix import pattern_share

    k = args.eval_n
    loaded = {}
    for mode in (v1.START, *args.modes):
        folder = heldout_dir(args, mode)
        if mode != v1.FROZEN and any(folder.glob("evals/*/results.json")):
            loaded[mode] = structure_matrix.load(folder, k)  # (trees, scores) keyed (family, method)
    if not loaded:
        return []
    rows, fam_rows = [], []
    start_auto = [s for f in args.families for s in loaded.get(v1.START, ({}, {}))[1].get((f, "auto"), [])]
    for mode, (trees, scores) in loaded.items():
        v = heldout_values(scores, oracle, args.families, k)
        mean = {m: 100 * v1.mean(list(x.values())) for m, x in v.items()}
        auto = [s for f in args.families for s in scores.get((f, "auto"), [])]
        flip = v1.heldout_paired(start_auto, auto, k, designs=True) if mode != v1.START and start_auto else ""
        rows.append(f"| {mode} | {mean['auto']:.1f} | {mean['sa']:.1f} | {mean['best single']:.1f} | "
                    f"{mean['oracle']:.1f} | {diff_text(v['sa'], v['auto'])} | {diff_text(v['best single'], v['auto'])} | "
                    f"{diff_text(v['oracle'], v['auto'])} | {flip} |")  # fmt: skip
        cells = []
        for f in args.families:
            share = pattern_share(trees.get((f, "auto"), []), oracle.patterns[f])["share"]
            cells.append(f"{diff_text(family_values(scores, f, 'sa', k), family_values(scores, f, 'auto', k))}, "
                         f"share {'-' if share is None else f'{100 * share:.0f}%'}")
        fam_rows.append(f"| {mode} | " + " | ".join(cells) + " |")
    return [
        f"Held-out: the suite's test split, {args.eval_limit} tasks per family, n = {k} (avg@{k}, %), each checkpoint",
        "in both roles. Best single method and per-family oracle as named by the oracle file; the differences are",
        "paired over tasks (bootstrap 95% CI, task count in brackets). The last column compares the checkpoint's",
        "`auto` with the start model's (App. C): tasks solved (avg >= 0.5) only by the checkpoint, split into the",
        "same modal design structure as the start model's (executor gain) or a different one (designer flip).",
        "",
        "| checkpoint | auto | sa | best single | oracle | auto - sa | auto - best single | auto - oracle | "
        "auto - start auto (App. C) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        "Per family: `auto` - `sa` (points, paired 95% CI) and the share of `auto`'s valid designs with the oracle",
        "pattern.",
        "",
        *family_table("checkpoint", args.families, fam_rows),
    ]


def family_table(first: str, columns: list[str], rows: list[str]) -> list[str]:
    """A markdown table with a column per name of ``columns`` (families, modes) after ``first``, and a blank line
    after it."""
    return [f"| {first} | " + " | ".join(columns) + " |", "| --- |" + " --- |" * len(columns), *rows, ""]


# ---- report ---------------------------------------------------------------------------------------------------


def command(args: argparse.Namespace) -> str:
    return "python benchmarks/coevolution_v2.py " + " ".join(a for a in sys.argv[1:] if a != "--report-only")


def report(args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from metaagent.eval.html import palette_png

    oracle = Oracle.read(args.oracle)
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    cols = max(4, len(args.families))
    fig, axes = plt.subplots(2, cols, figsize=(4 * cols, 7), sharex=True)
    top = {"rollout/reward/designer": "designer reward (Eq. 4)", "rollout/reward/executor": "executor reward",
           "rollout/valid_script_rate": "valid-script rate", "shortcuts": "shortcut executions per step"}  # fmt: skip
    head = " | ".join(f"{f}: oracle share (first 10 → last 10)" for f in args.families)
    lines = [f"| mode | steps | designer reward (first 10 → last 10) | executor reward (first 10 → last 10) | "
             f"valid-script rate (last 10) | {head} | shortcut executions |",
             "| --- |" + " --- |" * (5 + len(args.families))]  # fmt: skip
    share_slopes, single_rows, modal_rows, by_pattern = [], [], [], {}
    for mode in args.modes:
        folder = v1.run_dir(args, mode)
        rows = v1.read_metrics(folder)
        if rows:
            v1.copy_metrics(folder, results, mode)
        curves = {key: v1.series(rows, key) for key in top if key != "shortcuts"}
        curves["shortcuts"] = shortcut_series(rows)
        for ax, key in zip(axes[0], top):
            v1.plot_smoothed(ax, curves[key], mode, args.smooth)
        steps = step_trees(folder)
        shares = pattern_shares(steps, oracle.patterns)
        singles = pattern_shares(steps, dict.fromkeys(args.families, SINGLE))
        by_pattern[mode] = pattern_designs(steps)
        for ax, f in zip(axes[1], args.families):
            v1.plot_smoothed(ax, shares.get(f, []), mode, args.smooth)

        def first_last(points, fmt=".3f"):
            ys = [y for _, y in points]
            return f"{v1.mean(ys[:10]):{fmt}} → {v1.mean(ys[-10:]):{fmt}}" if ys else "-"

        lines.append(f"| {mode} | {v1.steps_done(folder)} | {first_last(curves['rollout/reward/designer'])} | "
                     f"{first_last(curves['rollout/reward/executor'])} | "
                     f"{v1.mean([y for _, y in curves['rollout/valid_script_rate'][-10:]]):.2f} | "
                     + " | ".join(first_last(shares.get(f, []), ".2f") for f in args.families)
                     + f" | {int(sum(y for _, y in curves['shortcuts']))} |")  # fmt: skip
        modal = modal_patterns(steps, args.families)
        modal_rows.append(f"| {mode} | " + " | ".join(modal[f] for f in args.families) + " |")
        single_rows.append(f"| {mode} | " + " | ".join(first_last(singles[f], ".2f") for f in args.families) + " |")
        trained = {r["step"] for r in (rows if mode == v1.FROZEN else v1.trained_steps(rows, "designer"))}
        if trained:
            share_slopes.append(f"| {mode} | " + " | ".join(
                v1.fit_text([p for p in shares.get(f, []) if p[0] in trained]) for f in args.families) + " |")
    for ax, title in zip(axes[0], top.values()):
        ax.set_title(f"{title} (mean of {args.smooth})")
    for ax, f in zip(axes[1], args.families):
        ax.set_title(f"{f}: share of oracle pattern {oracle.patterns[f]}")
        ax.set_xlabel("step")
        ax.set_ylim(-0.03, 1.03)
    for ax in axes[1][len(args.families) :]:
        ax.set_visible(False)
    for ax in axes.flat:
        if ax.lines:
            ax.legend(fontsize=7)
    v1.shade_stages(axes.flat, args)
    fig.tight_layout()
    (results / "curves.png").write_bytes(palette_png(fig, dpi=100))
    plt.close(fig)
    text = [
        f"# Co-evolution v2 ({args.model} on the suite's train split)",
        "",
        f"Command: `{command(args)}`",
        f"Families {', '.join(args.families)}; B = {args.batch_size}, M = {args.designs}, N = {args.executions}; "
        f"{args.steps} steps per mode, stage length {args.stage_len}, seed {args.seed}. Oracle ({oracle.path}): "
        + ", ".join(f"{f} `{oracle.methods[f]}` ({oracle.patterns[f]})" for f in args.families)
        + f"; best single `{oracle.best_single}`.",
        "",
        *lines,
        "",
        "Slope of each family's oracle-pattern share over the steps that trained the designer (frozen: every",
        "step), least squares with a 95% t interval:",
        "",
        *family_table("mode", args.families, share_slopes),
        "Single-agent share per family (first 10 → last 10 steps): the share of valid designs with the `single`",
        "pattern. A family whose oracle is `single` gains oracle share from a per-family choice only if the",
        "other families' single share does not rise with it; if it rises everywhere, the designer drifts to one",
        "agent.",
        "",
        *family_table("mode", args.families, single_rows),
        "The pattern each family's valid designs take most over the last 5 steps, with its share: a per-family",
        "choice shows as different patterns in families with different oracles.",
        "",
        *family_table("mode", args.families, modal_rows),
        *pattern_section(args.families, args.modes, by_pattern),
        *v1.role_sections(args),
        *v1.shortcut_section(args),
        *heldout_section(args, oracle),
    ]
    for mode in (v1.START, *args.modes):  # the held-out records travel with the table (replayable without runs/)
        if heldout_dir(args, mode).is_dir():
            v1.copy_compressed(heldout_dir(args, mode), results / "heldout" / mode)
    (results / "table.md").write_text("\n".join(text))
    write_status(args, oracle, results)
    print("\n".join(text))


def heldout_records(args: argparse.Namespace, mode: str) -> int:
    """The (family, method, task) records a mode's held-out evaluations hold so far (one line a task)."""
    from metaagent.records import glob_records, read_record_lines

    files = glob_records(heldout_dir(args, mode) / "evals", "*/rollouts/*/*/*.jsonl")
    return sum(len([line for line in read_record_lines(f)[0] if line.strip()]) for f in files)


def write_status(args: argparse.Namespace, oracle: Oracle, results: Path) -> None:
    """STATUS.md: the command, steps per mode, the held-out runs present, and the time left at the rate so far
    (before any step: the expected rate, :data:`PRIOR_STEP_S`)."""
    rows, times, left, chunks = [], [], 0, 0
    for mode in args.modes:
        folder = v1.run_dir(args, mode)
        metrics = v1.read_metrics(folder)
        times += [r["time/step_s"] for r in metrics if r.get("step", -1) >= 0 and "time/step_s" in r]
        held = sorted(p.parent.name for p in heldout_dir(args, mode).glob("evals/*/results.json"))
        done = v1.steps_done(folder)
        left += max(0, args.steps - done)
        chunks += -(-max(0, args.steps - done) // (args.chunk or args.save_every))
        rows.append(f"| {mode} | {done} of {args.steps} | {', '.join(held) or '-'} |")
    per_step = v1.mean(times) if times else PRIOR_STEP_S
    basis = f"the mean of the {len(times)} steps so far" if times else "expected: no step measured yet"
    train_h = (left * per_step + chunks * PRIOR_CHUNK_S) / 3600 / args.jobs  # --jobs modes at once
    evaluated = v1.eval_modes(args)  # the start model and each trained mode
    records = len(evaluated) * args.eval_limit * sum(len(oracle.eval_methods(f)) for f in args.families)
    todo = max(0, records - sum(heldout_records(args, mode) for mode in evaluated))
    eval_h = [todo * args.eval_n / 4 / rate / 60 / args.jobs for rate in EVAL_RECORDS_PER_MIN[::-1]]
    (results / "STATUS.md").write_text("\n".join([
        f"# Co-evolution v2 — status: {'PARTIAL' if left else 'training done, held-out PARTIAL' if todo else 'done'}",
        "",
        "## How to run",
        "",
        "From the repository root; rerunning the same command continues every mode from its newest checkpoint",
        "(`--chunk` steps a mode at a time, the mode with the fewest steps first); a job with no mode left to train",
        "runs the held-out evaluations of the modes that have their steps, which resume too:",
        "",
        f"    {command(args)}",
        "",
        "(with the checkout's environment, `PYTHONPATH=$PWD HF_HUB_OFFLINE=1 .venv/bin/python`; in the background over",
        f"several sessions: `nohup {command(args)} >> {args.runs}.log 2>&1 &`).",
        "",
        f"Time: {per_step:.0f} s a training step ({basis}; {PRIOR_STEP_S:.0f} s is expected on the shared 2-core "
        f"host from v1's bf16 steps, {V1_STEP_S[0]}-{V1_STEP_S[1]} s at B = 2, M = N = 2, times 4 for the larger "
        f"step), plus about "
        f"{PRIOR_CHUNK_S:.0f} s a chunk to restart the trainer: {left} steps in {chunks} chunks left, {args.jobs} "
        f"at once: about {train_h:.1f} h of training. Then {todo} of {records} held-out records left (checkpoint x "
        f"family x method x task, n = {args.eval_n}) at the structure matrix's {EVAL_RECORDS_PER_MIN[0]}-{EVAL_RECORDS_PER_MIN[1]} records "
        f"a minute (n = 4): {eval_h[0]:.1f}-{eval_h[1]:.1f} h "
        "on an idle host, longer on a shared one. See table.md for the numbers.",
        "",
        "| mode | steps | held-out families evaluated |",
        "| --- | --- | --- |",
        *rows,
        "",
    ]))  # fmt: skip


def seed_folders(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``--seed S`` (S != 0) with the default ``--runs`` / ``--results``: folders of their own
    (``<default>_seedS``),
    so several training seeds of the same command never resume each other's checkpoints; ``--domain-hint off``
    adds ``_nohint`` (a run without the hint never resumes one with it)."""
    for name in ("runs", "results"):
        if getattr(args, name) != parser.get_default(name):
            continue
        suffix = (f"_seed{args.seed}" if args.seed else "") + ("_nohint" if no_hint(args) else "")
        setattr(args, name, f"{parser.get_default(name)}{suffix}")


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, Oracle]:
    """The flags of this script (``argv``, default the command line) checked and completed as :func:`main` uses
    them: the seed's folders, the recipes, the families, the suite preset's overrides (benchmarks/evidence.py
    drives the same machinery with them)."""
    p = v1.parser(__doc__, MODES, modes=list(DEFAULT_MODES), save_every=5, model="embedded-sft-suite",
                  runs="runs/coevolution_v2", results="benchmarks/results/coevolution_v2", eval_limit=30, eval_n=4,
                  designer_max_tokens=384, jobs=2)  # fmt: skip
    p.add_argument("--families", nargs="+", default=None,
                   help="suite families (default: every family of --oracle; the seed-0 and seed-1 runs: "
                   "arith code lookup strings, before the start family)")
    p.add_argument("--oracle", default=ORACLE, help="the structure matrix's matrix.json (oracle per family)")
    p.add_argument("--batch-size", type=int, default=4, help="B: tasks a step")
    p.add_argument("--designs", type=int, default=4, help="M: designs a task")
    p.add_argument("--executions", type=int, default=2, help="N: executions a design")
    p.add_argument("--dtype", default="auto", type=resolve_dtype,
                   help="held-out evaluation weights (training: the config's); auto: bfloat16 where the CPU has "
                   "bf16 units, else float32 (bf16 is emulated there)")  # fmt: skip
    p.add_argument(
        "--baselines",
        action="store_true",
        help="held-out: add issue 61's baselines (sa@k, fixed:pot, best-per-domain chosen on val)",
    )
    p.add_argument(
        "--sa-k",
        type=int,
        default=0,
        help="--baselines' sa@k: k (0: sa@auto, k = the checkpoint's auto executor calls per sample)",
    )
    p.add_argument("--best-of-top", type=int, default=0,
                   help="best-per-domain's candidates: sa, fixed:pot and the structure matrix's N best fixed "
                   "templates per family (0: every template the matrix ran)")  # fmt: skip
    p.add_argument("--sa-grpo-ks", nargs="*", type=int, default=[],
                   help="sa_grpo's held-out methods: sa and sa@k for each k given (none: the designer modes' methods)")
    p.add_argument(
        "--domain-hint",
        choices=("on", "off"),
        default="on",
        help="off: the designer prompt without 'Task domain: <domain>.' (issue 62; rollout.domain_hint=off, "
        "held-out metaagent-eval --domain-hint off, folders ..._nohint); on: no override (the committed runs)",
    )
    args = p.parse_args(argv)
    if any(k < 1 for k in args.sa_grpo_ks):
        p.error(f"--sa-grpo-ks {args.sa_grpo_ks}: every k must be >= 1")
    seed_folders(args, p)
    args.recipes = recipes(args)
    if args.stage_len > 10:
        raise SystemExit(f"--stage-len {args.stage_len}: issue #42 asks for stage length <= 10")
    oracle = Oracle.read(args.oracle)
    args.families = args.families or sorted(oracle.methods)
    unknown = [f for f in args.families if f not in oracle.methods]
    if unknown:
        raise SystemExit(f"families {unknown} are not in {args.oracle}; it has {sorted(oracle.methods)}")
    args.train_args = [*suite_overrides(args), *args.train_args]
    return args, oracle


def main() -> None:
    args, oracle = parse()
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    if not args.report_only:
        evals = {} if args.no_eval else {mode: evaluations(args, oracle, mode) for mode in v1.eval_modes(args)}
        v1.train_round_robin(args, lambda: report(args), evals)
    report(args)


if __name__ == "__main__":
    main()
