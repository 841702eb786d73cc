"""The designer-choice ablation (issue 62, item 5): which of items 1-4 makes a per-family choice appear.

    python benchmarks/designer_choice.py --plan          # the compute plan (STATUS.md), nothing run
    python benchmarks/designer_choice.py                 # train and evaluate every (arm, seed); rerun = continue
    python benchmarks/designer_choice.py --report-only   # rewrite the report from the committed summaries

Each arm is ``designer_only`` on the five-family suite with the preset of ``benchmarks/evidence.py``
(:data:`evidence.PRESET` and :data:`evidence.PRESET_OVERRIDES` through :func:`evidence.seed_args`:
co-evolution v2's suite preset, B = 5, M = 4, N = 2, ``optim.lr=2e-5``, 40 steps) plus the arm's own settings,
each arm adding one item to the one before:

- ``base``: today's ``designer_only`` (the evidence experiment's designer run, with the domain sentence);
- ``nohint`` (item 1): ``coevolution_v2.py --domain-hint off``: ``rollout.domain_hint=off`` in training and
  ``--domain-hint off`` in the held-out evaluation, so the designer must read the family from the task text;
- ``knobs`` (1+2): ``optim.per_role.designer.loss_agg_mode=seq-mean-token-sum-norm``,
  ``optim.per_role.designer.entropy_coef=0.001``, ``algo.normalize=role``. Why these: the committed diagnosis
  is that single-agent scripts are 2.4x shorter and ``seq-mean-token-mean`` gives each of their tokens 2.4x
  the weight; ``seq-mean-token-sum-norm`` (Dr. GRPO, Liu et al. 2025) weighs every designer token alike, as
  ``token-sum`` would, but divides by one constant (the role's longest response), so the loss stays of the
  order of today's mode's (at most it) and the shared ``optim.lr=2e-5`` and gradient clipping keep their
  meaning (``token-sum`` would multiply the loss by the step's designer tokens, ~20 designs x ~200, which
  gradient clipping would then cut by a factor that changes from step to step). The entropy bonus is verl's
  former default (``actor.entropy_coeff: 0.001``): small against advantages of order 1, but on every designer
  token in every step, against the collapse to one pattern per domain within about ten steps
  (docs/guide/training.md); a larger one would trade valid scripts for exploration in a 135M model.
  ``algo.normalize=role`` is Dr. MAS's per-role scale (Eq. 5): in ``designer_only`` only the designer's
  samples are trained, so it divides them by their own spread over the step, which Eq. 5's per-question
  normalisation leaves below 1 when several questions have no spread (and, in the ``control`` arm, sets the
  scale of the D_i). M stays 4 in every arm, so the arms spend the same designs per question;
- ``control`` (1+2+3): ``algo.designer_baseline=control``, each design credited against one agent at its own
  budget (docs/concepts/credit.md);
- ``budget`` (1+2+3+4): ``rollout.budget.tags=[LOW, HIGH]`` (each tag alike, ``low_max_calls`` 1); held-out
  with ``metaagent-eval --budget HIGH`` (the tag it was trained with, no cap: comparable with the other arms).

``--seeds`` (default 0 1 2); the (arm, seed) runs go ``--jobs`` (default 2) at a time, seed by seed (every arm
of seed 0 first), each trained with co-evolution v2's chunked, resumable loop into
``<runs>/<arm>/seed<S>/designer_only`` and then evaluated held-out with evidence.py's evaluation at its
``--scale session`` sizes (the suite's test split, 20 tasks a family, n = 1: ``auto``, ``sa``, the family's
oracle, ``sa@auto``, ``fixed:pot``, ``best-per-domain`` among ``sa``, ``fixed:pot`` and the matrix's 2 best
templates, chosen on val; ``--external`` adds evidence.py's external benchmarks) into
``<runs>/<arm>/seed<S>/heldout_designer_only``. ``--runs`` defaults to ``~/metaagent-runs/designer_choice``.

**Committed summaries.** After every chunk and evaluation each run's compact summary goes to
``<results>/records/<arm>/seed<S>/``: ``summary.json.xz`` (per step, per family, each pattern's design count,
mean design reward and mean designer advantage from the rollout records; per budget tag the tasks, executions,
agent calls and correct answers; the metrics the report reads) and each held-out ``results.json.xz``. The
report is built from these files only. A new session is a new machine: a rerun first restores (the idea of
:func:`evidence.restore_records`): an (arm, seed) whose committed summary has every step and whose held-out
summaries are all complete is never trained or evaluated again; one that is not, and whose checkpoint is gone,
has its committed files dropped (git keeps them) and starts over.

The report (``--results``, default ``benchmarks/results/designer_choice``): ``table.md``: per arm and seed,
each family's modal pattern over the last ``--last`` (10) steps against that family's best pattern, the count
of families where they match and the goal line (>= 4 of 5 families in >= 2 of 3 seeds); each family's pattern
counts over those steps; shortcut refusals per step (``reward/shortcut/*``); under the budget arm, executor
calls per execution (one task sample) and accuracy at ``LOW`` vs ``HIGH`` (the quantities of
``rollout/budget/<TAG>/*``); the held-out ``auto`` against the strongest baseline at equal compute per arm
(:func:`evidence.headline`). ``shares.png``: per arm and family, the share of the family's best pattern among
the valid designs per step, a line per seed. ``STATUS.md``: PARTIAL or done, the plan, the command (the block
evidence.py writes too: ``_report.py``). The plan's seconds a step are ``--step-s``, else measured as evidence.py
measures them: on these runs' folders (or their committed summaries), else on the evidence experiment's
``designer_only`` runs (``--evidence-runs``, default ``evidence`` beside ``--runs``: the base arm's settings);
its records a minute are ``--eval-rate``; only without them is a rate the prior, and the plan says so.

The best pattern of a family is the structure matrix's per-family oracle
(``benchmarks/results/structure_matrix/matrix.json``, ``per_family.<family>.oracle_pattern``; ``--oracle``):
the start model's best of ``sa`` and the fixed templates, each at its own cost, in-sample; it stands in for
the issue's "best pattern at equal budget" until the evidence experiment's equal-compute baselines are in.
"""

from __future__ import annotations

import argparse
import json
import lzma
import math
import os
import shlex
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from metaagent.lazy import import_file
from metaagent.rollout.budget import BUDGET_TAGS, HIGH, LOW  # the tags' names, in one place

# benchmarks/ is not a package: the scripts load each other from their files
_report = import_file(Path(__file__).with_name("_report.py"), "_report")
evidence = import_file(Path(__file__).with_name("evidence.py"), "evidence")

v2 = evidence.v2
v1 = evidence.v1
ROOT = v1.ROOT
MODE = "designer_only"  # every arm trains the designer only
SUMMARY = "summary.json.xz"
#: the goal (issue 62): a family's modal pattern is its best one in >= 4 of 5 families, in >= 2 of 3 seeds
GOAL_FAMILIES = (4, 5)
GOAL_SEEDS = (2, 3)
#: the budget goal (issue 62): under LOW at most 1.5 executor calls per task sample, at >= 90% of HIGH's
#: accuracy
GOAL_LOW_CALLS, GOAL_LOW_ACCURACY = 1.5, 0.9
#: metrics a committed summary keeps (a key equal to one of these or starting with one); the rest of a run's
#: ~3.7 kB a step stays in the runs folder
KEPT_METRICS = ("step", "time/step_s", "schedule/active", "rollout/reward/", "rollout/valid_script_rate",
                "rollout/pattern_entropy", "rollout/top_pattern_share", "rollout/correct", "rollout/control_calls",
                "reward/shortcut/", "rollout/budget/", "credit/control_reward", "credit/design_minus_control_mean",
                "credit/control_errors", "credit/normalize_scale/", "train/entropy", "train/grad_norm")  # fmt: skip


@dataclass(frozen=True)
class Arm:
    """One arm: coevolution_v2 flags, train-metaagent overrides (after the preset's; the user's win over
    them) and metaagent-eval flags of its held-out evaluation."""

    name: str
    what: str
    flags: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    eval_flags: tuple[str, ...] = ()


NOHINT = ("--domain-hint", "off")  # item 1
KNOBS = ("optim.per_role.designer.loss_agg_mode=seq-mean-token-sum-norm", "optim.per_role.designer.entropy_coef=0.001",
         "algo.normalize=role")  # fmt: skip  (item 2; the choice is justified in the docstring)
CONTROL = ("algo.designer_baseline=control",)  # item 3
BUDGET = (f"rollout.budget.tags=[{LOW},{HIGH}]",)  # item 4
ARMS = {
    a.name: a
    for a in (
        Arm("base", "today's designer_only (domain sentence on)"),
        Arm("nohint", "1: no domain sentence", NOHINT),
        Arm("knobs", "1+2: and the designer's loss aggregation, entropy bonus, per-role normalisation", NOHINT, KNOBS),
        Arm("control", "1+2+3: and budget-matched control credit", NOHINT, KNOBS + CONTROL),
        Arm("budget", "1+2+3+4: and the LOW/HIGH budget tag", NOHINT, KNOBS + CONTROL + BUDGET, ("--budget", HIGH)),
    )
}


# ---- configuration -----------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=tuple(ARMS), help="arms (each adds an item)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds")
    p.add_argument("--runs", default=str(Path.home() / "metaagent-runs" / "designer_choice"))
    p.add_argument("--results", default="benchmarks/results/designer_choice")
    p.add_argument("--jobs", type=v1._positive, default=2, help="(arm, seed) runs trained or evaluated at once")
    p.add_argument("--external", nargs="*", default=[], choices=evidence.EXTERNAL_NAMES,
                   help="evidence.py's external benchmarks in each held-out evaluation (default: the suite only)")  # fmt: skip
    p.add_argument("--last", type=v1._positive, default=10, help="steps the modal pattern is taken over")
    p.add_argument("--no-eval", action="store_true", help="train only (no held-out evaluation)")
    p.add_argument("--plan", action="store_true", help="print and write the compute plan; run nothing")
    p.add_argument("--report-only", action="store_true", help="rewrite the report from the committed summaries")
    p.add_argument("--step-s", type=float, default=0.0,
                   help="the plan's seconds a step (0: measured on these runs, else on --evidence-runs, else a prior)")
    p.add_argument("--eval-rate", type=float, default=0.0,
                   help="the plan's held-out records a minute, as evidence.py's --eval-rate (0: evidence.py's prior)")
    p.add_argument("--evidence-runs", default=None,
                   help="the evidence experiment's runs folder, whose designer_only steps (the base arm's settings) "
                        "the plan measures when these runs have none (default: evidence beside --runs)")
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """This script's flags; every other flag and ``section.field=value`` override goes to every arm's
    coevolution_v2 after the preset and the arm's own (so ``--steps 1 --model tiny`` win over them)."""
    args, rest = parser().parse_known_args(argv)
    args.rest = rest
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.cache = {}
    if args.evidence_runs is None:
        args.evidence_runs = str(Path(args.runs).parent / "evidence")
    if not args.seeds:
        raise SystemExit("--seeds: give at least one training seed")
    return args


def evidence_args(args: argparse.Namespace, arm: str, runs: Path | None = None) -> argparse.Namespace:
    """evidence.py's arguments of one arm: its ``--scale session`` evaluation sizes, ``designer_only`` only,
    the arm's runs folder (``runs`` instead: the report's copy of the committed summaries)."""
    a = ARMS[arm]
    runs = Path(args.runs) / arm if runs is None else runs
    return evidence.parse(["--scale", "session", "--seeds", *map(str, args.seeds), "--modes", MODE, "--external",
                           *args.external, "--runs", str(runs), "--results", str(args.results), "--jobs", "1",
                           *a.flags, *a.overrides, *args.rest])  # fmt: skip


def pair_args(args: argparse.Namespace, arm: str, seed: int) -> tuple[argparse.Namespace, v2.Oracle]:
    """coevolution_v2's arguments of one (arm, seed): :func:`evidence.seed_args` of the arm's evidence
    arguments (runs in ``<runs>/<arm>/seed<S>``), with the arm's metaagent-eval flags."""
    key = (arm, seed)
    if key not in args.cache:
        a2, oracle = evidence.seed_args(evidence_args(args, arm), seed)
        a2.eval_flags = ARMS[arm].eval_flags
        args.cache[key] = (a2, oracle)
    return args.cache[key]


def pairs(args: argparse.Namespace) -> list[tuple[str, int]]:
    """Every (arm, seed), seed by seed: all arms of the first seed come first."""
    return [(arm, seed) for seed in args.seeds for arm in args.arms]


def committed_dir(args: argparse.Namespace, arm: str, seed: int) -> Path:
    return Path(args.results) / "records" / arm / f"seed{seed}"


def heldout_kinds(args: argparse.Namespace, arm: str, families: list[str]) -> list[str]:
    """The held-out folders of one run relative to its ``heldout_designer_only`` (``evals/<family>``,
    ``external/<name>``): evidence.py's :func:`evidence.expected_folders`; none with ``--no-eval``."""
    if args.no_eval:
        return []
    ev = evidence_args(args, arm)
    held = Path(ev.runs) / f"seed{args.seeds[0]}" / f"heldout_{MODE}"
    return [str(f.relative_to(held)) for f in evidence.expected_folders(ev, args.seeds[0], MODE, families)]


# ---- per-run summaries -------------------------------------------------------------------------------------


def _mean(xs: list) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def step_summary(step: int, trees: list) -> dict:
    """One step's rollout trees in brief: per family, each pattern's [design count, mean design reward, mean
    designer advantage] (``(invalid)`` for designs that failed the checks; :func:`coevolution_v2.pattern_designs`),
    and per budget tag the tasks, executions, agent calls (``len(turns)``, as ``rollout/budget/<TAG>/
    calls_per_execution`` counts them), the executions with a computable R_correct and its sum."""
    patterns = {}
    for family, by_pattern in v2.pattern_designs([(step, trees)]).items():
        patterns[str(family)] = {p: [len(ds), _mean([r for r, _ in ds]), _mean([a for _, a in ds])]
                                 for p, ds in by_pattern.items()}  # fmt: skip
    budget: dict[str, dict] = {}
    for t in trees:
        if getattr(t, "budget", None) is None:
            continue
        b = budget.setdefault(t.budget, {"tasks": 0, "executions": 0, "calls": 0, "scored": 0, "correct": 0.0})
        b["tasks"] += 1
        for _, e in t.executions():
            b["executions"] += 1
            b["calls"] += len(e.turns)
            if e.reward is not None and e.reward.correct is not None:
                b["scored"] += 1
                b["correct"] += float(e.reward.correct)
    return {"step": step, "patterns": patterns, "budget": budget}


def kept(row: dict) -> dict:
    return {k: v for k, v in row.items() if any(k == p or k.startswith(p) for p in KEPT_METRICS)}


def summarize(folder: Path, target: int) -> dict:
    """A run's committed summary: its run id, steps done and to do, the kept metrics, each step's
    :func:`step_summary`."""
    run = json.loads((folder / "run.json").read_text()) if (folder / "run.json").is_file() else {}
    rows = [kept(r) for r in v1.read_metrics(folder) if r.get("step", -1) >= 0]
    return {"run_id": run.get("run_id"), "steps_done": v1.steps_done(folder), "steps_target": target,
            "metrics": rows, "steps": [step_summary(s, trees) for s, trees in v2.step_trees(folder)]}  # fmt: skip


def read_summary(path: Path) -> dict | None:
    return json.loads(lzma.decompress(path.read_bytes())) if path.is_file() else None


def write_xz(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(lzma.compress(data))
    tmp.replace(path)  # a report reading it never sees half a file


#: what a committed held-out summary keeps of a results.json: per method on a benchmark (the entry's keys),
#: per task (the fields :class:`metaagent.eval.TaskScore` needs, and its calls, tokens and modal structure),
#: and of the run's config; what the report reads, about a tenth of the plain file (the results size budget of
#: tests/test_repository.py)
HELD_ENTRY = ("tasks", "complete", "budget", "valid_script_rate", "k", "selection")
HELD_TASK = ("task_id", "domain", "n", "c", "samples", "reward_errors", "avg", "pass", "maj", "agent_calls",
             "tokens", "designs", "valid_designs", "structure")  # fmt: skip
HELD_CONFIG = ("seed", "n", "limit", "budget", "domain_hint", "temperature", "methods", "benchmarks", "best_of")


def compact_results(res: dict) -> dict:
    """A held-out ``results.json`` reduced to :data:`HELD_ENTRY`, :data:`HELD_TASK` and :data:`HELD_CONFIG`
    (nonzero shortcut counts kept); the full file stays in the runs folder."""

    def entry(e: dict) -> dict:
        out = {k: e[k] for k in HELD_ENTRY if k in e}
        out["shortcuts"] = {k: v for k, v in (e.get("shortcuts") or {}).items() if v}
        out["per_task"] = [{k: t[k] for k in HELD_TASK if k in t} for t in e.get("per_task", [])]
        return out

    cells = {name: {"benchmarks": {b: {m: entry(e) for m, e in methods.items()}
                                   for b, methods in cell.get("benchmarks", {}).items()}}
             for name, cell in res.get("cells", {}).items()}  # fmt: skip
    config = {k: v for k, v in res.get("config", {}).items() if k in HELD_CONFIG}
    return {"compact": True, "run_id": res.get("run_id"), "complete": res.get("complete"), "ks": res.get("ks"),
            "k_main": res.get("k_main"), "methods": res.get("methods"), "config": config, "cells": cells}  # fmt: skip


def commit_run(args: argparse.Namespace, arm: str, seed: int) -> None:
    """Write one run's summary and its held-out ``results.json`` (those that exist) into the committed folder."""
    a2, _ = pair_args(args, arm, seed)
    folder = v1.run_dir(a2, MODE)
    out = committed_dir(args, arm, seed)
    if (folder / "metrics.jsonl").is_file():
        write_xz(out / SUMMARY, json.dumps(summarize(folder, a2.steps), separators=(",", ":")).encode())
    for kind in heldout_kinds(args, arm, a2.families):
        res = Path(a2.runs) / f"heldout_{MODE}" / kind / "results.json"
        if res.is_file():
            compact = compact_results(json.loads(res.read_text()))
            write_xz(out / f"heldout_{MODE}" / kind / "results.json.xz", json.dumps(compact).encode())


def heldout_in(args: argparse.Namespace, arm: str, seed: int, families: list[str]) -> dict[str, bool]:
    """kind -> whether its committed held-out summary is complete (absent kinds: False)."""
    out = {}
    for kind in heldout_kinds(args, arm, families):
        res = read_summary(committed_dir(args, arm, seed) / f"heldout_{MODE}" / kind / "results.json.xz")
        out[kind] = bool(res and res.get("complete"))
    return out


def run_done(args: argparse.Namespace, arm: str, seed: int) -> bool:
    """Whether the committed files hold the whole (arm, seed): every step and every held-out evaluation."""
    a2, _ = pair_args(args, arm, seed)
    s = read_summary(committed_dir(args, arm, seed) / SUMMARY)
    return bool(s) and s["steps_done"] >= a2.steps and all(heldout_in(args, arm, seed, a2.families).values())


def restore(args: argparse.Namespace) -> set[tuple[str, int]]:
    """Cross-session resume (:func:`evidence.restore_records`' idea): the (arm, seed) runs the committed files hold
    whole, which are neither trained nor evaluated again; a run whose committed files are not whole and whose
    checkpoint is gone (a new machine) has them dropped, so it starts over and rewrites them."""
    done = set()
    for arm, seed in pairs(args):
        if run_done(args, arm, seed):
            done.add((arm, seed))
            continue
        out = committed_dir(args, arm, seed)
        a2, _ = pair_args(args, arm, seed)
        if out.is_dir() and v1.checkpoint_step(v1.run_dir(a2, MODE)) == 0:
            print(f"designer_choice: {arm} seed {seed}: committed records incomplete and the checkpoint is gone; "
                  "dropping them and training again", flush=True)  # fmt: skip
            shutil.rmtree(out)
    return done


# ---- running -----------------------------------------------------------------------------------------------


def run_one(args: argparse.Namespace, arm: str, seed: int, lock: threading.Lock) -> None:
    """Train one (arm, seed) to its steps (co-evolution v2's chunked loop, one job), then run its held-out
    evaluations (evidence.py's: the suite's test split per family, and ``--external``'s); the summary is
    committed and the report rewritten after every chunk and evaluation."""
    a2, oracle = pair_args(args, arm, seed)
    ev = evidence_args(args, arm)

    def commit() -> None:
        with lock:
            commit_run(args, arm, seed)
            report(args)

    calls = []
    if not args.no_eval:
        chosen = evidence.chosen_externals(ev, a2.families)
        calls = v2.evaluations(a2, oracle, MODE) + evidence.external_evaluations(ev, a2, oracle, seed, MODE, chosen)
    evals = {MODE: [lambda call=call: (call(), commit()) for call in calls]}
    v1.train_round_robin(a2, commit, evals)
    commit()


def run(args: argparse.Namespace) -> None:
    """Every (arm, seed) not whole in the committed files, ``--jobs`` at a time (seed by seed)."""
    done = restore(args)
    lock = threading.Lock()
    todo = [(arm, seed) for arm, seed in pairs(args) if (arm, seed) not in done]
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    v1.run_jobs(args.jobs, [lambda arm=arm, seed=seed: run_one(args, arm, seed, lock) for arm, seed in todo])


def main() -> None:
    args = parse()
    if args.plan:
        print("\n".join(plan(args)))
        write_status(args)
        return
    if not args.report_only:
        run(args)
    report(args)


# ---- the compute plan --------------------------------------------------------------------------------------


def step_time(args: argparse.Namespace) -> tuple[float, str]:
    """Seconds a step, taken as evidence.py takes it (:func:`_report.rate`): ``--step-s``; else measured, the mean
    of the steps these runs trained (each (arm, seed)'s run folder, or its committed summary where that holds
    more: on a new machine), else of the evidence experiment's ``designer_only`` runs (``--evidence-runs``: the
    base arm's settings); else the prior, named as one."""
    times = []
    for arm, seed in pairs(args):
        a2, _ = pair_args(args, arm, seed)
        live = _report.step_times(v1.read_metrics(v1.run_dir(a2, MODE)))
        summary = read_summary(committed_dir(args, arm, seed) / SUMMARY) or {"metrics": []}
        times += max(live, _report.step_times(summary["metrics"]), key=len)
    basis = "measured: the mean of the {n} steps these runs trained"
    if not times:
        times = [t for run in sorted(Path(args.evidence_runs).glob(f"seed*/{MODE}"))
                 for t in _report.step_times(v1.read_metrics(run))]  # fmt: skip
        basis = (f"measured on the evidence experiment's {MODE} runs, the base arm's settings "
                 f"({_report.home_short(args.evidence_runs)}): the mean of {{n}} steps")  # fmt: skip
    return _report.rate(
        args.step_s, times, given_basis="given (--step-s)", measured_basis=basis, prior=evidence.COMMITTED_STEP_S,
        prior_basis="a prior, not measured here: the five-family designer runs' committed mean, AVX2 host",
    )  # fmt: skip


def eval_rate(args: argparse.Namespace) -> tuple[float, str]:
    """Held-out records a minute at n = 2, as evidence.py takes it: ``--eval-rate``, else the prior, named as one."""
    return _report.rate(
        args.eval_rate, [], given_basis="given (--eval-rate)", measured_basis="", prior=evidence.PRIOR_EVAL_RATE,
        prior_basis="a prior, not measured here: evidence.py's, the structure matrix's 4.6 a minute at n = 4 doubled",
    )  # fmt: skip


def plan(args: argparse.Namespace) -> list[str]:
    """The compute plan: the runs left x steps x step time, their held-out records x rate, in machine-hours,
    hours at ``--jobs`` and sessions of :data:`evidence.SESSION_H` h; and whether one run fits a session."""
    step_s, basis = step_time(args)
    rate, rate_basis = eval_rate(args)
    steps_left = chunks = records = 0
    left, one_h = [], 0.0
    for arm, seed in pairs(args):
        if run_done(args, arm, seed):
            continue
        a2, oracle = pair_args(args, arm, seed)
        left.append((arm, seed))
        n = max(0, a2.steps - v1.checkpoint_step(v1.run_dir(a2, MODE)))
        c = math.ceil(n / (a2.chunk or a2.save_every))
        r = 0
        if not args.no_eval:
            chosen = evidence.chosen_externals(evidence_args(args, arm), a2.families)
            r = evidence.checkpoint_records(a2, oracle, chosen, True, MODE)
        steps_left, chunks, records = steps_left + n, chunks + c, records + r
        full = math.ceil(a2.steps / (a2.chunk or a2.save_every))
        one_h = max(one_h, _report.train_hours(a2.steps, full, step_s, v2.PRIOR_CHUNK_S)
                    + _report.eval_hours(r, a2.eval_n, rate))  # fmt: skip
    a2, _ = pair_args(args, args.arms[0], args.seeds[0])
    train_h = _report.train_hours(steps_left, chunks, step_s, v2.PRIOR_CHUNK_S)
    eval_h = _report.eval_hours(records, a2.eval_n, rate)
    total = train_h + eval_h
    lines = [
        f"Plan: {len(left)} of {len(pairs(args))} (arm, seed) runs left (arms {', '.join(args.arms)} x seeds "
        f"{' '.join(map(str, args.seeds))}; designer_only, {a2.steps} steps each) x {step_s:.0f} s a step ({basis}; "
        f"the control arm's steps also run its controls, the budget arm's LOW questions are capped), plus "
        f"{v2.PRIOR_CHUNK_S:.0f} s a chunk: {steps_left} steps, {train_h:.1f} machine-hours of training;",
        f"{records} held-out records (task x method, each final checkpoint, evidence.py's --scale session sizes: "
        f"{a2.eval_limit} tasks a family, n = {a2.eval_n}) x {rate:.1f} records a minute ({rate_basis}): "
        f"{eval_h:.1f} machine-hours;",
        _report.sessions_line(total, args.jobs, evidence.SESSION_H),
    ]
    if one_h > evidence.SESSION_H:
        lines.append(
            f"One run takes about {one_h:.1f} h (training and its held-out evaluation, one job), more than a "
            f"{evidence.SESSION_H}-h session: a run a session does not finish starts over on the next machine "
            "(its checkpoint does not survive it). Run where the runs folder survives, or give fewer --steps."
        )
    return lines


# ---- the report --------------------------------------------------------------------------------------------


def run_steps(s: dict | None) -> list[dict]:
    return sorted((s or {}).get("steps", []), key=lambda st: st["step"])


def pattern_counts(steps: list[dict], family: str) -> dict[str, int]:
    """pattern -> valid designs of ``family`` with that pattern in ``steps`` (invalid designs left out), in the
    order the patterns were first written."""
    counts: dict[str, int] = {}
    for st in steps:
        for pattern, (n, *_) in st["patterns"].get(family, {}).items():
            if pattern != v2.INVALID:
                counts[pattern] = counts.get(pattern, 0) + n
    return counts


def modal(counts: dict[str, int]) -> tuple[str | None, float | None, bool]:
    """(the most written pattern, its share of the valid designs, whether another pattern ties it); (None,
    None, False) without a valid design. Ties: the first written is named."""
    if not counts:
        return None, None, False
    top = max(counts.values())
    tied = [p for p, n in counts.items() if n == top]
    return tied[0], top / sum(counts.values()), len(tied) > 1


def matches(counts: dict[str, int], best: str) -> bool:
    """The family's modal pattern is ``best``, and alone: a tie with another pattern is no match."""
    pattern, _, tie = modal(counts)
    return pattern == best and not tie


def needed(goal: tuple[int, int], of: int) -> int:
    """The goal's count scaled to ``of`` (4 of 5 families, 2 of 3 seeds), rounded up."""
    return math.ceil(goal[0] * of / goal[1])


def share_series(steps: list[dict], family: str, pattern: str) -> list[tuple[int, float]]:
    """(step, share of the step's valid ``family`` designs with ``pattern``); no point without a valid one."""
    out = []
    for st in steps:
        counts = pattern_counts([st], family)
        if counts:
            out.append((st["step"], counts.get(pattern, 0) / sum(counts.values())))
    return out


def choice_tables(args, summaries: dict, oracle, families: list[str]) -> list[str]:
    """The goal table and, per arm and seed, each family's modal pattern over the last ``--last`` steps."""
    need_f = needed(GOAL_FAMILIES, len(families))
    need_s = needed(GOAL_SEEDS, len(args.seeds))
    goal_rows, rows = [], []
    for arm in args.arms:
        met, whole = [], 0
        for seed in args.seeds:
            s = summaries.get((arm, seed))
            steps = run_steps(s)
            target = pair_args(args, arm, seed)[0].steps
            if not steps:
                rows.append(f"| {arm} | {seed} | 0 of {target} | " + " | ".join("-" for _ in families) + " | - |")
                continue
            window = steps[-args.last :]
            cells, hits = [], 0
            for f in families:
                counts = pattern_counts(window, f)
                pattern, share, tie = modal(counts)
                hit = matches(counts, oracle.patterns[f])
                hits += hit
                cells.append("-" if pattern is None else
                             f"{pattern} {share:.2f}{' (tie)' if tie else ''}{' ✓' if hit else ''}")  # fmt: skip
            complete = s["steps_done"] >= target
            whole += complete
            if complete and hits >= need_f:
                met.append(seed)
            steps_text = f"{s['steps_done']} of {target}"
            rows.append(f"| {arm} | {seed} | {steps_text} | " + " | ".join(cells) + f" | {hits} of {len(families)} |")
        verdict = ("met" if len(met) >= need_s else
                   "missed" if whole == len(args.seeds) else f"pending ({whole} of {len(args.seeds)} seeds trained)")  # fmt: skip
        seeds_text = ", ".join(map(str, met)) or "none"
        goal_rows.append(f"| {arm} | {ARMS[arm].what} | {seeds_text} | {verdict} |")
    best = " | ".join(f"`{oracle.patterns[f]}`" for f in families)
    return [
        f"Goal: a family's modal pattern over the last {args.last} steps is its best pattern in >= {need_f} of "
        f"{len(families)} families, in >= {need_s} of {len(args.seeds)} seeds (issue 62: 4 of 5, 2 of 3). The best "
        f"pattern per family is the structure matrix's per-family oracle ({oracle.path}, `oracle_pattern`: the start "
        "model's best of `sa` and the fixed templates, each at its own cost, in-sample), standing in for the best "
        "pattern at equal budget until the evidence experiment's equal-compute baselines are in.",
        "",
        "| arm | what | seeds meeting it (trained to their steps) | goal |",
        "| --- | --- | --- | --- |",
        *goal_rows,
        "",
        f"Modal pattern per family over the last {args.last} steps (share of the valid designs; ✓: the best "
        "pattern, alone; a tie is no match) and the families that match:",
        "",
        f"| arm | seed | steps | {' | '.join(families)} | match |",
        "| --- | --- | --- |" + " --- |" * (len(families) + 1),
        f"| best pattern | | | {best} | |",
        *rows,
        "",
    ]


def pattern_table(args, summaries: dict, families: list[str]) -> list[str]:
    """Per family, each arm's valid designs by pattern over the last ``--last`` steps, pooled over the seeds."""
    out = [f"Valid designs by pattern over the last {args.last} steps, all seeds pooled (count, share):", ""]
    for f in families:
        per_arm = {arm: {} for arm in args.arms}
        for arm in args.arms:
            for seed in args.seeds:
                for p, n in pattern_counts(run_steps(summaries.get((arm, seed)))[-args.last :], f).items():
                    per_arm[arm][p] = per_arm[arm].get(p, 0) + n
        patterns = sorted({p for c in per_arm.values() for p in c}, key=lambda p: -sum(c.get(p, 0) for c in per_arm.values()))
        rows = []
        for p in patterns:
            cells = []
            for arm in args.arms:
                total = sum(per_arm[arm].values())
                cells.append(f"{per_arm[arm].get(p, 0)} ({per_arm[arm].get(p, 0) / total:.2f})" if total else "-")
            rows.append(f"| {p} | " + " | ".join(cells) + " |")
        out += [f"{f}:", "", *v2.family_table("pattern", list(args.arms), rows or ["| - |" + " - |" * len(args.arms)])]
    return out


def shortcut_table(args, summaries: dict) -> list[str]:
    """Per arm and seed: executions refused as a shortcut per step (every class of reward/shortcut/* summed) and
    per class over all steps."""
    from metaagent.rewards.shortcuts import SHORTCUT_CLASSES

    rows = []
    for arm, seed in sorted(summaries, key=lambda k: (args.arms.index(k[0]), k[1])):
        metrics = summaries[(arm, seed)]["metrics"]
        per_step = v2.shortcut_series(metrics)
        totals = {c: int(sum(r.get(f"reward/shortcut/{c}", 0) for r in metrics)) for c in SHORTCUT_CLASSES}
        found = ", ".join(f"{c} {n}" for c, n in totals.items() if n) or "none"
        rows.append(f"| {arm} | {seed} | {' '.join(str(int(v)) for _, v in per_step) or '-'} | {found} |")
    return [
        "Shortcut refusals: executions per step that tried to earn reward without solving the task and were refused",
        "(`reward/shortcut/*`, every class of metaagent/rewards/shortcuts.py summed), and per class over all steps:",
        "",
        "| arm | seed | refusals per step | per class, all steps |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
    ]


def budget_table(args, summaries: dict) -> list[str]:
    """The budget arm: per seed, over the last ``--last`` steps, each tag's tasks, executor calls per execution
    (one task sample) and accuracy (mean R_correct), pooled over the steps' executions; the goal: LOW <= 1.5
    calls and LOW accuracy >= 90% of HIGH's."""
    rows = []
    for (arm, seed), s in sorted(summaries.items(), key=lambda kv: (args.arms.index(kv[0][0]), kv[0][1])):
        window = run_steps(s)[-args.last :]
        tags = {}
        for st in window:
            for tag, b in st["budget"].items():
                t = tags.setdefault(tag, dict.fromkeys(b, 0))
                for k, v in b.items():
                    t[k] += v
        if not tags:
            continue
        cells, acc = [], {}
        for tag in BUDGET_TAGS:
            t = tags.get(tag)
            if not t:
                cells.append("-")
                continue
            acc[tag] = t["correct"] / t["scored"] if t["scored"] else None
            calls = f"{t['calls'] / t['executions']:.2f} calls" if t["executions"] else "no execution"
            cells.append(f"{t['tasks']} tasks, {calls}, " + ("-" if acc[tag] is None else f"{100 * acc[tag]:.1f}%"))
        low = tags.get(LOW) or {"executions": 0}
        ratio = acc[LOW] / acc[HIGH] if acc.get(LOW) is not None and acc.get(HIGH) else None
        ratio_text = "-" if ratio is None else f"{100 * ratio:.0f}%"
        if not low["executions"] or ratio is None:
            goal = "- (no LOW execution or no HIGH accuracy yet)"
        else:
            met = low["calls"] / low["executions"] <= GOAL_LOW_CALLS and ratio >= GOAL_LOW_ACCURACY
            goal = "met" if met else "missed"
        rows.append(f"| {arm} | {seed} | {cells[0]} | {cells[1]} | {ratio_text} | {goal} |")
    if not rows:
        return []
    return [
        f"Budget tags (the last {args.last} steps; the quantities of `rollout/budget/<TAG>/*`, pooled over the steps'",
        "executions): tasks, executor calls per execution (one task sample) and accuracy (mean R_correct). Goal:",
        f"{LOW} <= {GOAL_LOW_CALLS} calls and {LOW} accuracy >= {100 * GOAL_LOW_ACCURACY:.0f}% of {HIGH}'s.",
        "",
        "| arm | seed | LOW | HIGH | LOW / HIGH accuracy | goal |",
        "| --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]


def heldout_section(args, families: list[str]) -> list[str]:
    """Per arm, :func:`evidence.headline` (``auto`` - the strongest baseline at equal compute, per family, mean
    over seeds with the t interval) over a copy of the committed held-out summaries in evidence.py's layout."""
    out = [
        "Held-out (evidence.py's evaluation at its --scale session sizes; the budget arm with --budget HIGH): `auto`",
        "against the strongest of the checkpoint's own `sa@auto` (k = its `auto`'s executor calls), `fixed:pot` and",
        "`best-per-domain` (chosen on val), per family:",
        "",
    ]
    any_in = False
    with tempfile.TemporaryDirectory() as tmp:
        for arm in args.arms:
            for seed in args.seeds:
                for f in (committed_dir(args, arm, seed) / f"heldout_{MODE}").rglob("results.json.xz"):
                    rel = f.parent.relative_to(committed_dir(args, arm, seed))
                    dst = Path(tmp) / arm / f"seed{seed}" / rel / "results.json"
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    dst.write_bytes(lzma.decompress(f.read_bytes()))
            lines, gains = evidence.headline(evidence_args(args, arm, Path(tmp) / arm), families)
            any_in |= any(gains.values())
            out += [f"### {arm}" if line == f"### {MODE}" else line for line in lines]
    return out if any_in else [*out[:-1], "", "No held-out evaluation is in yet.", ""]


def plot_shares(args, summaries: dict, oracle, families: list[str], path: Path) -> bool:
    """shares.png: a panel per (arm, family), the share of the family's best pattern among the valid designs
    per step (mean of ``--smooth``), a line per seed; False (no file) while no step is in."""
    if not any(run_steps(s) for s in summaries.values()):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from metaagent.eval.html import palette_png

    smooth = pair_args(args, args.arms[0], args.seeds[0])[0].smooth
    fig, axes = plt.subplots(len(args.arms), len(families), figsize=(2.6 * len(families), 1.9 * len(args.arms)),
                             sharex=True, sharey=True, squeeze=False)  # fmt: skip
    for i, arm in enumerate(args.arms):
        for j, f in enumerate(families):
            ax = axes[i][j]
            for seed in args.seeds:
                v1.plot_smoothed(ax, share_series(run_steps(summaries.get((arm, seed))), f, oracle.patterns[f]),
                                 f"seed {seed}", smooth)  # fmt: skip
            ax.set_ylim(-0.03, 1.03)
            ax.set_title(f"{arm}: {f} ({oracle.patterns[f]})", fontsize=7)
            ax.tick_params(labelsize=6)
            if i == len(args.arms) - 1:
                ax.set_xlabel("step", fontsize=7)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"share of each family's best pattern among its valid designs (mean of {smooth} steps)", fontsize=8)
    fig.tight_layout()
    path.write_bytes(palette_png(fig, dpi=70))
    plt.close(fig)
    return True


def read_summaries(args: argparse.Namespace) -> dict[tuple[str, int], dict]:
    out = {}
    for arm, seed in pairs(args):
        s = read_summary(committed_dir(args, arm, seed) / SUMMARY)
        if s:
            out[(arm, seed)] = s
    return out


def command(args: argparse.Namespace) -> str:
    skip = ("--report-only", "--plan")
    return "python benchmarks/designer_choice.py " + shlex.join(a for a in args.argv if a not in skip)


def report(args: argparse.Namespace) -> None:
    """table.md, shares.png and STATUS.md from the committed summaries alone."""
    a2, oracle = pair_args(args, args.arms[0], args.seeds[0])
    families = a2.families
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    summaries = read_summaries(args)
    png = plot_shares(args, summaries, oracle, families, results / "shares.png")
    arms = "; ".join(f"`{a}` ({ARMS[a].what}): {' '.join(ARMS[a].flags + ARMS[a].overrides) or 'the preset'}"
                     for a in args.arms)  # fmt: skip
    text = [
        "# Designer choice: which of issue 62's items 1-4 makes a per-family choice appear",
        "",
        f"Command: `{command(args)}` (STATUS.md: status and plan). `designer_only` on the suite ({', '.join(families)}) "
        f"with evidence.py's preset (B = {a2.batch_size}, M = {a2.designs}, N = {a2.executions}, {a2.steps} steps, "
        f"model {a2.model}); seeds {', '.join(map(str, args.seeds))}. Arms: {arms}. Everything here is read from "
        "the committed summaries (records/).",
        "",
        *choice_tables(args, summaries, oracle, families),
        *pattern_table(args, summaries, families),
        *shortcut_table(args, summaries),
        *budget_table(args, summaries),
        *([] if args.no_eval else heldout_section(args, families)),
        "shares.png: per arm and family, the share of the family's best pattern per step, a line per seed."
        if png else "No shares.png yet (no step is in).",
        "",
    ]
    (results / "table.md").write_text("\n".join(text))
    write_status(args)


def write_status(args: argparse.Namespace) -> None:
    """STATUS.md: PARTIAL until every (arm, seed) is whole in the committed files; the plan; per run the steps
    and the held-out evaluations in; how to continue."""
    rows, done = [], True
    for arm, seed in pairs(args):
        a2, _ = pair_args(args, arm, seed)
        s = read_summary(committed_dir(args, arm, seed) / SUMMARY)
        held = heldout_in(args, arm, seed, a2.families)
        done &= run_done(args, arm, seed)
        evals = ", ".join(k.split("/", 1)[1] + ("" if ok else " (partial)") for k, ok in held.items()
                          if (committed_dir(args, arm, seed) / f"heldout_{MODE}" / k / "results.json.xz").is_file())  # fmt: skip
        rows.append(f"| {arm} | {seed} | {s['steps_done'] if s else 0} of {a2.steps} | {evals or '-'} |")
    runs = _report.home_short(args.runs)
    _report.write_status(
        args.results,
        title="Designer choice (issue 62 item 5)",
        done=done,
        plan=plan(args),
        runs=[f"Runs folder: `{runs}` (outside the work tree by default). Committed summaries: "
              "`records/<arm>/seed<S>/` here; a run whole there is never trained or evaluated again, and the report "
              "is built from them alone."],
        columns=("arm", "seed", "steps (committed)", "held-out evaluations in (committed)"),
        rows=rows,
        how_title="How to run",
        how=["From the repository root with `PYTHONPATH=$PWD HF_HUB_OFFLINE=1 .venv/bin/python`; rerunning continues "
             "every", "run and evaluation where it stopped (on a new machine: from the committed summaries):"],
        command=command(args),
        log=f"{runs}/designer_choice.log",
    )  # fmt: skip


if __name__ == "__main__":
    main()
