"""CPU co-evolution experiment: embedded-sft trained in the four schedule modes, evaluated on held-out tasks.

    .venv/bin/python benchmarks/coevolution_cpu.py                # start, or continue where it stopped
    .venv/bin/python benchmarks/coevolution_cpu.py --report-only  # rewrite the figures from what exists

For each mode (stagewise, coupled, designer_only, executor_only) it runs ``train-metaagent --config default``
from ``embedded-sft`` with the same seed and task stream, ``--steps`` steps (default 40) and a short stage
length (``--stage-len``, default 5; the paper uses K = 30), checkpointing every ``--save-every`` steps into
``runs/coevolution/<mode>``; a run that stopped is continued with ``--resume`` from its newest checkpoint.
Each final checkpoint is then evaluated with ``metaagent-eval`` (methods ``auto`` and ``sa``, bundled test
tasks, ``--eval-limit`` tasks per domain, ``--eval-n`` samples each; resumable as well).

Writes into ``--results`` (default benchmarks/results/coevolution_cpu/):

- ``curves.png``: per-role reward per step (designer: design mean of its executions, Eq. 4; executor: mean
  execution reward), smoothed over ``--smooth`` steps, one line per mode; designer stages of the stagewise
  run shaded;
- ``table.md``: a Table-4-style table (mode, steps done, reward per role first vs last 10 steps, valid-script
  rate, how many correct math answers were boxed as an unevaluated expression, held-out accuracy of auto and sa
  with 95% CIs) and, per mode, the slope of the designer's reward over its designer-stage steps with a 95% CI
  (least squares; t interval); each final checkpoint's held-out avg@k minus the start model's on the same tasks
  (paired bootstrap), with App. C's same- vs different-structure split of the tasks only it solves;
- ``metrics_<mode>.jsonl.xz``: a copy of each run's metrics, compressed (``xz -dc`` reads it);
- ``heldout/eval_<mode>/``: a copy of each held-out ``metaagent-eval`` results directory (records compressed as
  ``.jsonl.xz`` without their log-probs, results.json, table.md; no report.html, which ``metaagent-eval
  --report-only`` writes from the records), so ``metaagent-replay`` opens any held-out task without the
  checkpoints.

``--modes ... frozen`` (after the overrides: ``--modes`` takes every word after it) adds a paired
baseline: the trainer's ``frozen`` schedule mode (no role trained, no update), so its step ``s`` is the
untrained model's rollout of step ``s`` with the same tasks and seeds (the results committed before this mode
existed ran ``designer_only`` at lr 1e-30, updates that change no weight: the same rollouts at the cost of the
updates); the table then also gives each mode's reward gain over it step by step, which removes the
task-to-task spread that dominates a 2-task step's reward.

Everything is resumable: run it again with the same arguments and it continues (``--resume`` is implied when a
run folder has checkpoints). The modes are trained ``--chunk`` steps at a time (default ``--save-every``): each
chunk resumes the mode's run with its full ``--steps`` (so the learning-rate schedule is the one of an
uninterrupted run) and stops it once the checkpoint at the chunk's end is written; ``--jobs`` modes at once (and
as many held-out evaluations: one decode loop keeps about one core busy), a free job taking the mode with the
fewest steps, or, with none left to train, the held-out evaluation of a mode that has its steps. A partial result therefore covers all modes to within about a chunk of each other; the table says
how many steps each has.

``benchmarks/coevolution_v2.py`` (the same experiment on the structure-sensitive suite) imports this script's
training loop, evaluation, flags, plots and role tables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODES = ("stagewise", "coupled", "designer_only", "executor_only")
START = "start"  # the held-out row of the model every mode starts from
# the paired baseline: the same task stream and seeds without updates (the trainer's schedule mode "frozen"), so
# its step s is the untrained model's rollout of step s, and "mode minus frozen" at a step is free of which tasks
# were drawn
FROZEN = "frozen"
ROLES = ("designer", "executor")
BENCHMARKS = ("bundled:test/math", "bundled:test/code")  # the held-out tasks
NUMERAL = re.compile(r"-?\d+(?:\.\d+)?")  # a plain number: a boxed math answer in final form


def run_dir(args: argparse.Namespace, mode: str) -> Path:
    return Path(args.runs) / mode


def steps_done(folder: Path) -> int:
    rows = read_metrics(folder)
    return 1 + max((r["step"] for r in rows if r.get("step", -1) >= 0), default=-1)


def read_metrics(folder: Path) -> list[dict]:
    path = folder / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line of a killed run
    return rows


def checkpoint_step(folder: Path) -> int:
    """Steps done at the newest complete checkpoint of ``folder`` (0 when it has none)."""
    from metaagent.learn.checkpoint import latest_checkpoint

    newest = latest_checkpoint(folder)
    return 0 if newest is None else int(newest.name.rsplit("_", 1)[-1])


def train_command(args: argparse.Namespace, mode: str, folder: Path) -> list[str]:
    """The ``train-metaagent`` command of ``mode`` into ``folder``. A recipe mode (``args.recipes``: v2's
    ``sa_grpo``) is a schedule mode of the trainer plus overrides that win over the preset's."""
    schedule_mode, recipe = getattr(args, "recipes", {}).get(mode, (mode, ()))
    return [
        sys.executable, "-m", "metaagent.cli.train", "--config", args.config,
        "--model", args.model, "--mode", schedule_mode,
        "--stage-len", str(args.stage_len),
        "--steps", str(args.steps), "--out", str(folder), "--trainer.save-every", str(args.save_every),
        "--trainer.val-every", "0", f"trainer.seed={args.seed}", *args.train_args, *recipe,
    ]  # fmt: skip


def train(args: argparse.Namespace, mode: str, until: int | None = None) -> bool:
    """Train ``mode`` to step ``until`` (default: ``--steps``); False when it already got there."""
    folder = run_dir(args, mode)
    until = args.steps if until is None else min(until, args.steps)
    done = checkpoint_step(folder)
    if done >= until and (folder / "checkpoints").is_dir():
        return False
    cmd = train_command(args, mode, folder)
    if (folder / "checkpoints").is_dir() and any((folder / "checkpoints").iterdir()):
        cmd.append("--resume")
    print("+", " ".join(cmd), f"  # until step {until}", flush=True)
    child = subprocess.Popen(cmd, cwd=ROOT)
    while child.poll() is None:
        time.sleep(5)
        if until < args.steps and checkpoint_step(folder) >= until:
            child.terminate()  # the chunk's checkpoint is complete; the next chunk resumes from it
            child.wait()
            prune(folder)
            return True
    if child.returncode != 0:
        raise subprocess.CalledProcessError(child.returncode, cmd)
    prune(folder)
    return True


def prune(folder: Path) -> None:
    """Keep only the newest complete checkpoint of a run (a full-weight checkpoint with AdamW moments of the
    embedded model is about 1.6 GB; four modes x eight chunks would not fit a small disk)."""
    from metaagent.learn.checkpoint import list_checkpoints

    for old in list_checkpoints(folder)[:-1]:
        shutil.rmtree(old, ignore_errors=True)


def final_model(folder: Path) -> Path | None:
    from metaagent.learn.checkpoint import latest_checkpoint, read_meta

    ckpt = latest_checkpoint(folder)
    if ckpt is None:
        return None
    models = read_meta(ckpt)["models"]
    key = "policy" if "policy" in models else sorted(models)[0]
    return ckpt / models[key]


def evaluate(
    args: argparse.Namespace,
    mode: str,
    *,
    benchmarks: tuple[str, ...] = BENCHMARKS,
    methods: tuple[str, ...] = ("auto", "sa"),
    out: Path | None = None,
    extra: tuple[str, ...] = (),
) -> Path | None:
    """Held-out evaluation of a mode's final checkpoint (``mode="start"``: the model every mode starts from):
    ``metaagent-eval`` of ``methods`` on ``benchmarks`` into ``out`` (default ``<runs>/eval_<mode>``), resumable."""
    model = args.model if mode == START else final_model(run_dir(args, mode))
    if model is None:
        return None
    out = Path(args.runs) / f"eval_{mode}" if out is None else out
    refresh = getattr(args, "refresh_only", False)  # benchmarks/evidence.py --refresh: re-table, never sample
    if refresh and not (out / "run.json").is_file():
        return None
    cmd = [
        sys.executable, "-m", "metaagent.cli.eval", "--model", str(model), "--methods", *methods,
        "--benchmarks", *benchmarks, "--limit", str(args.eval_limit),
        "--n", str(args.eval_n), "--seed", str(args.seed), "--temperature", "0.7",
        "--designer-max-tokens", str(args.designer_max_tokens),
        "--executor-max-tokens", str(args.executor_max_tokens), "--out", str(out),
        "--continuous", "--no-html", *extra, *(("--report-only",) if refresh else ()),  # concurrency, workers: auto
        # coevolution_v2 --domain-hint off (issue 62): the start model too is asked without the domain sentence
        *(("--domain-hint", "off") if getattr(args, "domain_hint", "on") == "off" else ()),
        # benchmarks/designer_choice.py: a run's own metaagent-eval flags (its budget arm: --budget HIGH)
        *getattr(args, "eval_flags", ()),
    ]  # fmt: skip
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    return out


def eval_modes(args: argparse.Namespace) -> tuple[str, ...]:
    """The held-out evaluations' modes, in the order they run: the start model (every gain is paired to it), then
    ``--modes``; ``frozen``'s final model is the start."""
    return (START, *(m for m in args.modes if m != FROZEN))


#: set by Ctrl-C (SIGINT) in :func:`run_jobs`: jobs take no new chunk or evaluation
STOP = threading.Event()


def run_jobs(jobs: int, calls: list) -> None:
    """Run the zero-argument ``calls``, ``jobs`` at a time (each starts a subprocess and waits for it); the first
    error is raised once every call has ended. Ctrl-C (SIGINT to the process group: the trainers finish their
    step and write a checkpoint, an evaluation keeps its records) sets :data:`STOP`: nothing new starts, the
    running subprocesses end, and the script exits 130 with one line; rerunning continues."""
    from concurrent.futures import ThreadPoolExecutor, wait

    pool = ThreadPoolExecutor(max_workers=jobs)
    futures = []
    try:
        futures += [pool.submit(call) for call in calls]
        while wait(futures, timeout=1.0).not_done:
            pass
    except KeyboardInterrupt:
        STOP.set()
        print("interrupted: the running chunks and evaluations stop at their step (checkpoints and records are "
              "kept); nothing new starts; rerun the same command to continue", file=sys.stderr, flush=True)  # fmt: skip
        pool.shutdown(wait=True, cancel_futures=True)
        raise SystemExit(130) from None
    pool.shutdown()
    for future in futures:
        future.result()


def train_round_robin(args: argparse.Namespace, on_chunk, evals: dict[str, list] | None = None) -> None:
    """Train every mode of ``args.modes`` to ``--steps``, ``--chunk`` steps a mode at a time, ``--jobs`` modes at
    once, and call ``on_chunk()`` after each chunk that trained something (the report of what exists; one at a
    time). A job that ends takes the mode with the fewest steps that no job is training (ties: ``--modes``
    order), so a fast mode (``frozen``) never waits for a slow one to finish a round, and the modes stay within
    about a chunk of each other.

    ``evals`` maps a mode to its held-out evaluations (zero-argument calls): a job with no mode to train runs the
    next evaluation whose mode is ready (has its ``--steps``, or is not trained here, like ``start``), in
    ``evals`` order, so a core never idles while the last modes train. A chunk that fails is not retried and its
    mode's evaluations are dropped; the first error (chunk or evaluation) is raised once every job has ended."""
    chunk = args.chunk or args.save_every
    if chunk % args.save_every:
        raise SystemExit(f"--chunk {chunk} must be a multiple of --save-every {args.save_every}")
    report = threading.Lock()
    work = threading.Condition()  # guards reached, training, failed, pending, errors
    reached = {mode: checkpoint_step(run_dir(args, mode)) for mode in args.modes}
    training: set[str] = set()  # modes a job is training
    failed: set[str] = set()  # modes whose chunk failed: neither trained nor evaluated again
    pending = {mode: list(calls) for mode, calls in (evals or {}).items()}
    errors: list[BaseException] = []

    def ready(mode: str) -> bool:
        return mode not in reached or reached[mode] >= args.steps

    def take():
        """("train", mode), ("eval", call), or None when nothing is left; waits while the only evaluations left
        belong to modes that another job is training."""
        with work:
            while not STOP.is_set():
                free = [m for m in args.modes if m not in training | failed and reached[m] < args.steps]
                if free:
                    mode = min(free, key=lambda m: reached[m])  # min keeps the first of equals: --modes order
                    training.add(mode)
                    return "train", mode
                for mode, calls in pending.items():
                    if calls and mode not in failed and ready(mode):
                        return "eval", calls.pop(0)
                if not any(calls and mode in training for mode, calls in pending.items()):
                    return None
                work.wait(timeout=1.0)
            return None

    def job() -> None:
        while (task := take()) is not None:
            kind, what = task
            try:
                if kind == "eval":
                    what()
                    continue
                trained = train(args, what, (reached[what] // chunk + 1) * chunk)
                with work:
                    reached[what] = checkpoint_step(run_dir(args, what))
                if trained:
                    with report:
                        on_chunk()
            except Exception as e:  # noqa: BLE001 - raised below, once every job has ended
                with work:
                    errors.append(e)
                    if kind == "train":
                        failed.add(what)
            finally:
                if kind == "train":
                    with work:
                        training.discard(what)
                        work.notify_all()

    run_jobs(args.jobs, [job] * args.jobs)
    if errors:
        raise errors[0]


# ---- figures ---------------------------------------------------------------------------------------------------


def series(rows: list[dict], key: str) -> list[tuple[int, float]]:
    return [(r["step"], float(r[key])) for r in rows if r.get("step", -1) >= 0 and r.get(key) is not None]


def slope_ci(points: list[tuple[int, float]]) -> tuple[float, float, float] | None:
    """Least-squares slope of (step, value) points and its 95% t interval; None with fewer than 3 points."""
    from metaagent.eval.metrics import slope_ci as fit

    return fit(points) if len({p[0] for p in points}) >= 2 and len(points) >= 3 else None


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def trained_steps(rows: list[dict], role: str) -> list[dict]:
    """Rows of steps where ``role`` was trained (``schedule/active`` names the active roles)."""
    return [r for r in rows if str(r.get("schedule/active", "")) in (role, "both")]


def paired(rows: list[dict], base: list[dict], key: str, steps: set[int] | None = None) -> list[tuple[int, float]]:
    """(step, value of ``rows`` minus value of ``base`` at the same step): same tasks and seeds, so the task
    draw cancels; only steps in ``steps`` when given."""
    ref = dict(series(base, key))
    return [(s, v - ref[s]) for s, v in series(rows, key) if s in ref and (steps is None or s in steps)]


def mean_ci_text(points: list[tuple[int, float]]) -> str:
    """Mean of the values with a 95% t interval over steps."""
    from metaagent.eval.metrics import t_quantile

    xs = [v for _, v in points]
    if len(xs) < 3:
        return "fewer than 3 steps"
    m = mean(xs)
    half = t_quantile(0.975, len(xs) - 1) * math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))
    return f"{m:+.3f} (95% CI {m - half:+.3f} to {m + half:+.3f}; {len(xs)} steps)"


def fit_text(points: list[tuple[int, float]]) -> str:
    fit = slope_ci(points)
    if fit is None:
        return "fewer than 3 steps"
    return f"{fit[0]:+.4f} per step (95% CI {fit[1]:+.4f} to {fit[2]:+.4f}; {len(points)} steps)"


def eval_cell(folder: Path, method: str) -> str:
    """avg@k of ``method`` per held-out benchmark of a metaagent-eval run (mean, 95% CI, tasks), or "-"."""
    path = folder / "results.json"
    if not path.is_file():
        return "-"
    data = json.loads(path.read_text())
    metric = f"avg@{data.get('k_main', 1)}"
    out = []
    for cell in data.get("cells", {}).values():
        for bench, methods in cell.get("benchmarks", {}).items():
            m = (methods.get(method) or {}).get("metrics", {}).get(metric)
            if m:
                lo, hi = m["ci95"]
                out.append(f"{bench.split(':')[-1]} {100 * m['mean']:.0f}% [{100 * lo:.0f}, {100 * hi:.0f}] ({m['tasks']})")
    return "; ".join(out) or "-"


def boxed_expressions(files: list[Path]) -> tuple[int, int]:
    """(correct math executions, those whose boxed answer is not a plain number) in rollout records: the
    verifier compares symbolically, so ``\\boxed{16 + 19}`` for "What is 16 + 19?" counts as correct; the share
    tells a learned shortcut (copy the question's expression into the box) from learned arithmetic."""
    from metaagent.records import read_record_lines
    from metaagent.rewards.math import find_boxed

    correct = expr = 0
    for f in files:
        for line in read_record_lines(f)[0]:  # plain or compressed (.jsonl.xz)
            rec = json.loads(line)
            if rec["task"].get("domain") != "math":
                continue
            for design in rec["designs"]:
                for ex in design["executions"]:
                    if (ex.get("reward") or {}).get("correct") == 1.0:
                        correct += 1
                        box = find_boxed(ex.get("answer") or "")
                        expr += box is not None and not NUMERAL.fullmatch(box)
    return correct, expr


def expr_text(files: list[Path]) -> str:
    correct, expr = boxed_expressions(files)
    return f"{expr}/{correct}" if correct else "0/0"


def task_scores(folder: Path, method: str) -> list:
    """``method``'s per-task scores (``TaskScore``) over every held-out benchmark of a metaagent-eval run."""
    from metaagent.eval.scoring import TaskScore

    path = folder / "results.json"
    if not path.is_file():
        return []
    out = []
    for cell in json.loads(path.read_text()).get("cells", {}).values():
        for methods in cell.get("benchmarks", {}).values():
            out += [TaskScore.from_dict(t) for t in (methods.get(method) or {}).get("per_task", [])]
    return out


def heldout_paired(base: list, other: list, k: int, *, designs: bool) -> str:
    """``other - base`` avg@k on the held-out tasks both scored, with App. C's split of the tasks only ``other``
    solves (``metaagent.eval.analysis.paired_comparison``)."""
    from metaagent.eval.analysis import paired_comparison
    from metaagent.eval.report import signed

    c = paired_comparison(base, other, metric="avg", k=k)
    if c["diff"] is None:
        return "-"
    lo, hi = c["ci95"]
    split = f"; {c['only_b_same_structure']} same structure" if designs and c["only_b"] else ""
    return (f"{signed(100 * c['diff'])} [{signed(100 * lo)}, {signed(100 * hi)}] ({c['tasks']} tasks; solved only here "
            f"{c['only_b']}{split}, only by start {c['only_a']})")


def shortcut_section(args: argparse.Namespace) -> list[str]:
    """Per mode, the reward's shortcut counters step by step (``reward/shortcut/<class>``: executions the reward
    refused as a shortcut, :mod:`metaagent.rewards.shortcuts`); runs from before the counters show none."""
    from metaagent.rewards.shortcuts import SHORTCUT_CLASSES

    keys = [f"reward/shortcut/{name}" for name in SHORTCUT_CLASSES]
    rows = []
    for mode in args.modes:
        metrics = [r for r in read_metrics(run_dir(args, mode)) if r.get("step", -1) >= 0 and keys[0] in r]
        if not metrics:
            continue
        per_step = " ".join(str(int(sum(r.get(k, 0) for k in keys))) for r in metrics)
        totals = {k.rsplit("/", 1)[-1]: int(sum(r.get(k, 0) for r in metrics)) for k in keys}
        found = ", ".join(f"{name} {n}" for name, n in totals.items() if n) or "none"
        rows.append(f"| {mode} | {len(metrics)} | {per_step} | {found} |")
    if not rows:
        return []
    return [
        "Shortcut counters: executions per step that tried a way to earn reward without solving the task and were",
        "refused (every class of `metaagent/rewards/shortcuts.py`, summed; per class over all steps at the right).",
        "",
        "| mode | steps | shortcut executions per step | per class, all steps |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
    ]


def plot_smoothed(ax, points: list[tuple[int, float]], mode: str, smooth: int) -> None:
    """One mode's (step, value) points as a line, each the mean of the last ``smooth`` points (frozen: dashed)."""
    if not points:
        return
    k = max(1, smooth)
    xs = [p[0] for p in points]
    ys = [mean([q[1] for q in points[max(0, i - k + 1) : i + 1]]) for i in range(len(points))]
    ax.plot(xs, ys, label=mode, linestyle="--" if mode == FROZEN else "-", color="0.4" if mode == FROZEN else None)


def shade_stages(axes, args: argparse.Namespace) -> None:
    """Shade the designer stages of the stagewise run (executor first, then alternating every stage)."""
    if args.stage_len and "stagewise" in args.modes:
        for ax in axes:
            for start in range(args.stage_len, args.steps, 2 * args.stage_len):
                ax.axvspan(start - 0.5, start + args.stage_len - 0.5, color="0.9", zorder=0)


def role_sections(args: argparse.Namespace) -> list[str]:
    """The slopes of each role's reward over the steps that trained it, and (with a ``frozen`` run) each mode's
    reward gain over the frozen model step for step: markdown tables from the runs' metrics."""
    slopes, gains = [], []
    base = read_metrics(run_dir(args, FROZEN))
    for mode in args.modes:
        rows = read_metrics(run_dir(args, mode))
        if mode == FROZEN:
            continue
        d_rows, e_rows = trained_steps(rows, "designer"), trained_steps(rows, "executor")
        if base and rows:
            d_steps, e_steps = {r["step"] for r in d_rows}, {r["step"] for r in e_rows}
            gains.append(
                f"| {mode} | {mean_ci_text(paired(rows, base, 'rollout/reward/designer')[-10:])} | "
                f"{fit_text(paired(rows, base, 'rollout/reward/designer', d_steps)) if d_steps else '-'} | "
                f"{mean_ci_text(paired(rows, base, 'rollout/reward/executor')[-10:])} | "
                f"{fit_text(paired(rows, base, 'rollout/reward/executor', e_steps)) if e_steps else '-'} |"
            )
        if d_rows or e_rows:
            slopes.append(f"| {mode} | "
                          f"{fit_text(series(d_rows, 'rollout/reward/designer')) if d_rows else '-'} | "
                          f"{fit_text(series(d_rows, 'rollout/valid_script_rate')) if d_rows else '-'} | "
                          f"{fit_text(series(e_rows, 'rollout/reward/executor')) if e_rows else '-'} |")
    text = [
        "Slopes over the steps where a role was trained (least squares over (step, value), 95% t interval): the",
        "designer's reward (the mean of its designs' rewards, Eq. 4) and valid-script rate over the steps that",
        "trained the designer, the executor's reward over the steps that trained the executor.",
        "",
        "| mode | designer reward, designer-trained steps | valid-script rate, designer-trained steps | "
        "executor reward, executor-trained steps |",
        "| --- | --- | --- | --- |",
        *slopes,
        "",
    ]
    if gains:
        text += [
            f"Paired against `{FROZEN}` (the untrained model on the same tasks with the same seeds, step for step; "
            f"{steps_done(run_dir(args, FROZEN))} steps): the gain of each mode's reward at a step over the frozen",
            "model's at that step, as a mean over the mode's last 10 steps and as a slope over the steps that trained",
            "the role (95% t intervals).",
            "",
            "| mode | designer gain, last 10 steps | designer gain slope, designer-trained steps | "
            "executor gain, last 10 steps | executor gain slope, executor-trained steps |",
            "| --- | --- | --- | --- | --- |",
            *gains,
            "",
        ]
    return text


def copy_metrics(folder: Path, results: Path, mode: str) -> None:
    """Copy a run's ``metrics.jsonl`` to ``results/metrics_<mode>.jsonl.xz`` (a plain copy an earlier report
    left goes): one line of every metric a step, 140-160 kB a 40-step run plain, 10-15 kB compressed."""
    from metaagent.records import compress

    shutil.copyfile(folder / "metrics.jsonl", results / f"metrics_{mode}.jsonl")
    compress(results / f"metrics_{mode}.jsonl")


def copy_compressed(src: Path, dst: Path) -> None:
    """Copy a results folder with its rollout records compressed (``.jsonl.xz``) and without log-probs, as
    committed records are, and its evaluation summaries compressed too (``results.json`` -> ``results.json.xz``,
    replacing an older copy: co-evolution v2's held-out summaries are 1.6 MB plain, 55 kB compressed, against the
    committed results' 10 MB budget, ``tests/test_repository.py``); ``metaagent-replay`` reads the copy, and
    ``metaagent-eval --report-only`` on it with the run's settings (its ``run.json``) writes the plain summary
    again from the records."""
    from metaagent.eval.runner import RESULTS_FILE
    from metaagent.records import RECORD_SUFFIX, compress
    from metaagent.replay.run import record_files

    shutil.copytree(src, dst, dirs_exist_ok=True)
    for f in record_files(dst):
        if f.name.endswith(RECORD_SUFFIX):
            compress(f, logprobs=False)
    for f in dst.rglob(RESULTS_FILE):  # a plain copy left by an earlier report goes too
        compress(f)


def report(args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from metaagent.eval.html import palette_png
    from metaagent.records import glob_records

    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    lines = [
        "| mode | steps | designer reward (first 10 → last 10) | executor reward (first 10 → last 10) | "
        "valid-script rate (last 10) | correct math answers boxed as an expression (last 10) | held-out auto | "
        "held-out sa |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode in args.modes:
        folder = run_dir(args, mode)
        rows = read_metrics(folder)
        if rows:
            copy_metrics(folder, results, mode)
        for ax, role in zip(axes, ROLES):
            plot_smoothed(ax, series(rows, f"rollout/reward/{role}"), mode, args.smooth)
        d = [v for _, v in series(rows, "rollout/reward/designer")]
        e = [v for _, v in series(rows, "rollout/reward/executor")]
        valid = [v for _, v in series(rows, "rollout/valid_script_rate")]
        ev = Path(args.runs) / f"eval_{mode}"
        lines.append(
            f"| {mode} | {steps_done(folder)} | {mean(d[:10]):.3f} → {mean(d[-10:]):.3f} | "
            f"{mean(e[:10]):.3f} → {mean(e[-10:]):.3f} | {mean(valid[-10:]):.2f} | "
            f"{expr_text(glob_records(folder / 'rollouts', 'step_*.jsonl')[-10:])} | "
            f"{eval_cell(ev, 'auto')} | "
            f"{eval_cell(ev, 'sa')} |"
        )
    ev = Path(args.runs) / f"eval_{START}"
    if (ev / "results.json").is_file():
        lines.append(f"| {START} ({args.model}) | 0 | | | | | {eval_cell(ev, 'auto')} | {eval_cell(ev, 'sa')} |")
    for ax, role in zip(axes, ROLES):
        ax.set_title(f"{role} reward (mean of {args.smooth} steps)")
        ax.set_xlabel("step")
        ax.legend()
    shade_stages(axes, args)
    fig.tight_layout()
    (results / "curves.png").write_bytes(palette_png(fig, dpi=110))
    text = [
        "# CPU co-evolution (embedded-sft, configs/default.yaml)",
        "",
        f"Command: `python benchmarks/coevolution_cpu.py {' '.join(a for a in sys.argv[1:] if a != '--report-only')}`",
        f"Steps {args.steps} per mode, stage length {args.stage_len} (paper: K = 30), seed {args.seed}; "
        f"held-out: bundled test, {args.eval_limit} tasks per domain, n = {args.eval_n}.",
        "",
        *lines,
        "",
        *role_sections(args),
    ]
    text += shortcut_section(args)
    start_dir = Path(args.runs) / f"eval_{START}"
    start = {m: task_scores(start_dir, m) for m in ("auto", "sa")}
    k_main = json.loads((start_dir / "results.json").read_text())["k_main"] if start["auto"] else 1
    held = []
    for mode in args.modes:
        ev = Path(args.runs) / f"eval_{mode}"
        if mode != FROZEN and start["auto"] and (ev / "results.json").is_file():
            auto = task_scores(ev, "auto")
            valid = sum(t.valid_designs for t in auto) / max(1, sum(t.designs for t in auto))
            held.append(f"| {mode} | {heldout_paired(start['auto'], auto, k_main, designs=True)} | "
                        f"{heldout_paired(start['sa'], task_scores(ev, 'sa'), k_main, designs=False)} | {valid:.2f} | "
                        f"{expr_text(glob_records(ev, 'rollouts/*/*math*/auto.jsonl'))} | "
                        f"{expr_text(glob_records(ev, 'rollouts/*/*math*/sa.jsonl'))} |")
    if held:
        sv = start["auto"]
        text += [
            f"Held-out, paired against `{START}` ({args.model}, the model every mode starts from; same tasks, seeds",
            "and sampling): each final checkpoint's avg@k minus the start model's, in points, pooled over the held-out",
            "math and code tasks (paired bootstrap over tasks, 95%); a task counts as solved at avg >= 0.5, and the",
            "tasks only the trained model solves are split into same modal design structure as the start model's",
            (f"(executor gain) or a different one (designer flip), as in App. C. Start model's valid-script rate: "
             f"{sum(t.valid_designs for t in sv) / max(1, sum(t.designs for t in sv)):.2f}."),
            "",
            ("| mode | auto, final minus start | sa, final minus start | auto valid-script rate | correct math "
             "answers boxed as an expression, auto | same, sa |"),
            "| --- | --- | --- | --- | --- | --- |",
            (f"| {START} | | | | {expr_text(glob_records(start_dir, 'rollouts/*/*math*/auto.jsonl'))} | "
             f"{expr_text(glob_records(start_dir, 'rollouts/*/*math*/sa.jsonl'))} |"),
            *held,
            "",
        ]
    for mode in (START, *args.modes):  # the held-out records travel with the table (replayable without runs/)
        ev = Path(args.runs) / f"eval_{mode}"
        if (ev / "results.json").is_file():
            copy_compressed(ev, results / "heldout" / ev.name)
    (results / "table.md").write_text("\n".join(text))
    print("\n".join(text))


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive count; give 1 or more")
    return value


def parser(doc: str, choices: tuple[str, ...], **defaults) -> argparse.ArgumentParser:
    """The flags of a co-evolution script (this one and its successors): the modes to choose from (``choices``,
    and ``frozen``), and each flag's default from ``defaults`` (keyword = the flag's dest) over this script's."""
    d = dict(modes=list(MODES), steps=40, stage_len=5, save_every=2, config="default", model="embedded-sft",
             runs="runs/coevolution", results="benchmarks/results/coevolution_cpu", eval_limit=14, eval_n=2,
             designer_max_tokens=320, executor_max_tokens=192, jobs=1)  # fmt: skip
    unknown = set(defaults) - set(d)
    if unknown:
        raise TypeError(f"no co-evolution flag for default(s) {sorted(unknown)}; flags with defaults: {sorted(d)}")
    d.update(defaults)
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", nargs="+", default=d["modes"], choices=(*choices, FROZEN),
                   help=f"modes to train; '{FROZEN}' adds the paired baseline (no updates, same tasks and seeds)")
    p.add_argument("--steps", type=int, default=d["steps"])
    p.add_argument("--stage-len", type=int, default=d["stage_len"])
    p.add_argument("--save-every", type=int, default=d["save_every"])
    p.add_argument("--chunk", type=int, default=0, help="steps per mode per round (0: --save-every)")
    p.add_argument("--jobs", type=_positive, default=d["jobs"],
                   help="modes trained (and held-out evaluations run) at once: the decode loop keeps about one core "
                        "busy, so two jobs use a 2-core host (measured: one eval process 1.1 cores, two 1.9)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--config", default=d["config"])
    p.add_argument("--model", default=d["model"])
    p.add_argument("--runs", default=d["runs"])
    p.add_argument("--results", default=d["results"])
    p.add_argument("--eval-limit", type=int, default=d["eval_limit"], help="held-out tasks per benchmark")
    p.add_argument("--eval-n", type=int, default=d["eval_n"], help="held-out samples per task")
    p.add_argument("--designer-max-tokens", type=int, default=d["designer_max_tokens"])
    p.add_argument("--executor-max-tokens", type=int, default=d["executor_max_tokens"])
    p.add_argument("--smooth", type=int, default=5)
    p.add_argument("--resume", action="store_true", help="accepted for clarity: every run continues anyway")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--no-eval", action="store_true")
    p.add_argument("train_args", nargs="*", help="extra train-metaagent overrides (section.field=value)")
    return p


def main() -> None:
    args = parser(__doc__, MODES).parse_args()
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    if not args.report_only:
        evals = {} if args.no_eval else {mode: [lambda mode=mode: evaluate(args, mode)] for mode in eval_modes(args)}
        train_round_robin(args, lambda: report(args), evals)
    report(args)


if __name__ == "__main__":
    main()
