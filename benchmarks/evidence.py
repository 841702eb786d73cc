"""The evidence experiment (issue 61, items 2, 4 and 5): several training seeds of the designer modes and of the
RL-trained single agent on the five-family suite, each final checkpoint evaluated held-out on the suite's test
split and on benchmarks nobody here wrote, against the equal-compute baselines, and the report.

    python benchmarks/evidence.py --plan                 # the compute plan (STATUS.md), nothing run
    python benchmarks/evidence.py                        # train and evaluate every seed; rerun = continue
    python benchmarks/evidence.py --report-only          # rewrite the report from whatever records exist
    python benchmarks/evidence.py --only-start --external gsm8k humaneval --external-limit gsm8k=40 humaneval=30

Top to bottom, for each ``--seeds`` (default 0 1 2) in turn: co-evolution v2's machinery
(``benchmarks/coevolution_v2.py``, imported: :func:`coevolution_v2.parse` with :data:`PRESET`, the five-family
run's command of ``benchmarks/results/coevolution_v2_five/STATUS.md``, plus ``--baselines`` and the seed)
trains ``--modes`` (default ``designer_only stagewise sa_grpo``; ``coupled`` when named) into
``<runs>/seed<S>/<mode>`` ``--jobs`` at a time, resumed from each newest checkpoint (``--resume`` is implied);
a job with nothing to train runs the held-out evaluations of the modes that have their steps:

- the suite's test split per family (v2's: ``auto``, ``sa``, the family's oracle, ``sa@auto``, ``fixed:pot``,
  ``best-per-domain`` chosen on val) into ``<runs>/seed<S>/heldout_<mode>/evals/<family>``;
- :data:`EXTERNAL` (GSM8K's seeded 300, HumanEval 164, MBPP's sanitized test 257, the suite's held-out
  templates per family; GSM8K and MBPP ship with the package, and a placed copy under
  ``$METAAGENT_BENCHMARKS_DIR`` takes priority) with ``auto``, ``sa``, ``sa@auto``, ``fixed:pot`` on answer
  tasks and ``best-per-domain`` where the benchmark has a selection split disjoint from the scored one, into
  ``<runs>/seed<S>/heldout_<mode>/external/<name>``;
- the start model (``--model``, no training) once, with evaluation seed 0: the suite into the first seed's
  ``heldout_start`` and the external benchmarks into ``<runs>/start/external/<name>``.

``--runs`` defaults to ``~/metaagent-runs/evidence`` (outside the work tree: the checkpoints survive a new
checkout). The report (``--results``, default ``benchmarks/results/evidence``) is rewritten after every chunk
and evaluation: ``table.md`` (the headline), ``seed<S>.md``, ``start.md``, ``gains.png``, ``checkpoints.json``
(each final checkpoint's content hash), ``COMMAND.md`` and ``STATUS.md`` (the plan, and per seed x mode the
steps and the evaluations in; PARTIAL until every seed is in).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from metaagent.data.loaders import placed_copy, shipped_copy
from metaagent.lazy import import_file

# benchmarks/ is not a package: the scripts load each other from their files
_report = import_file(Path(__file__).with_name("_report.py"), "_report")
v2 = import_file(Path(__file__).with_name("coevolution_v2.py"), "coevolution_v2")

v1 = v2.v1
ROOT = v1.ROOT
START = v1.START
SA_GRPO = v2.SA_GRPO
DESIGNER_MODES = ("designer_only", "stagewise", "coupled")  # the modes whose `auto` is the claim
DEFAULT_MODES = ("designer_only", "stagewise", SA_GRPO)
#: the five-family run's command (benchmarks/results/coevolution_v2_five/STATUS.md) and --baselines; held-out
#: n = 2 (the issue's n >= 2) to fit the compute plan
PRESET = ["--families", "arith", "code", "lookup", "start", "strings", "--batch-size", "5", "--baselines",
          "--eval-n", "2"]  # fmt: skip
PRESET_OVERRIDES = ["optim.lr=2e-5"]
#: seconds a training step of the preset took: the five-family run's mean of 160 steps, on an AVX2 host
COMMITTED_STEP_S = 227.0
#: held-out (task x method) records a minute at n = 2 before one is measured here: the structure matrix's
#: 4.6-10.0 at n = 4 (idle 2-core host), taken at its low end and doubled for n = 2
PRIOR_EVAL_RATE = 9.2
SESSION_H = 2.5  # one background session's hours


@dataclass(frozen=True)
class External:
    """A held-out benchmark beside the suite's test split: its metaagent-eval label, the tasks evaluated, the
    split best-per-domain chooses on (None: the benchmark has none disjoint from the scored one), whether its
    tasks are code (no ``fixed:pot``), whether it is a hub source (read from a placed copy, else the copy
    shipped in the package, else the hub; False: built into a package) and the suite family whose
    best-per-domain candidates it uses."""

    label: str
    limit: int
    selection: str | None
    code: bool
    hub: bool
    family: str | None


def externals(families: list[str]) -> dict[str, External]:
    """name -> :class:`External`; the held-out templates one per family (``heldout_<family>``, 40 tasks)."""
    out = {
        "gsm8k": External("gsm8k:test", 300, None, False, True, None),
        "humaneval": External("humaneval", 164, None, True, False, None),
        "mbpp": External("mbpp:test", 257, "validation", True, True, "code"),
    }
    for f in families:
        out[f"heldout_{f}"] = External(f"suite_{f}:heldout", 40, "val", f == "code", False, f)
    return out


EXTERNAL_NAMES = ("gsm8k", "humaneval", "mbpp", "heldout")  # --external's choices ("heldout": every family)

#: --scale: coevolution_v2 flags added after PRESET (the user's own win), and the external benchmarks with their
#: task limits when --external / --external-limit are not given. ``session`` fits one seed's two runs
#: (designer_only and sa_grpo: ~1.3 h of training on 2 cores) and their held-out evaluations in one session
#: (a new session starts on a new machine: checkpoints do not survive it, the committed records do): the suite's
#: test split at 20 tasks a family, n = 1; best-per-domain among sa, fixed:pot and the matrix's 2 best templates
#: a family; the sa+grpo checkpoint as sa, sa@2 and sa@3 only; GSM8K 40 and HumanEval 30
SCALES: dict[str, dict] = {
    "full": {"v2": [], "external": list(EXTERNAL_NAMES), "limits": {}},
    "session": {
        "v2": ["--eval-limit", "20", "--eval-n", "1", "--best-of-top", "2", "--sa-grpo-ks", "2", "3"],
        "external": ["gsm8k", "humaneval"],
        "limits": {"gsm8k": 40, "humaneval": 30},
    },
}


# ---- configuration -------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds")
    p.add_argument("--scale", choices=tuple(SCALES), default="full",
                   help="full: the issue's evaluation sizes; session: one seed's training and evaluation in one "
                   "2-core session (SCALES)")  # fmt: skip
    p.add_argument("--modes", nargs="+", default=list(DEFAULT_MODES), choices=(*DESIGNER_MODES, SA_GRPO))
    p.add_argument("--runs", default=str(Path.home() / "metaagent-runs" / "evidence"))
    p.add_argument("--results", default="benchmarks/results/evidence")
    p.add_argument("--external", nargs="*", default=None, choices=EXTERNAL_NAMES,
                   help="external benchmarks (default: the --scale's)")
    p.add_argument("--external-limit", nargs="*", default=[], metavar="NAME=N",
                   help="tasks of an external benchmark (heldout=N: per family), e.g. gsm8k=40")  # fmt: skip
    p.add_argument("--only-start", action="store_true", help="evaluate the start model only (no training)")
    p.add_argument("--no-suite", action="store_true", help="skip the suite test split's evaluations")
    p.add_argument("--plan", action="store_true", help="print and write the compute plan; run nothing")
    p.add_argument(
        "--budget-hours", type=float, default=0.0, help="machine-hours the run may take (0: no cut)"
    )
    p.add_argument("--step-s", type=float, default=0.0, help="seconds a step (0: measured, else 227 s)")
    p.add_argument("--eval-rate", type=float, default=0.0, help="records a minute (0: measured, else prior)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--refresh", action="store_true",
                   help="with --report-only: first rewrite each started evaluation's results.json from its records "
                   "(metaagent-eval --report-only), so a stopped or running one shows its tasks so far")  # fmt: skip
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """This script's flags; every other flag and ``section.field=value`` override goes to coevolution_v2 after
    :data:`PRESET` (so ``--steps 1 --model tiny`` win over it)."""
    args, rest = parser().parse_known_args(argv)
    scale = SCALES[args.scale]
    if args.external is None:
        args.external = list(scale["external"])
    args.v2_flags = [*scale["v2"], *(a for a in rest if a.startswith("-") or "=" not in a)]
    args.v2_overrides = [a for a in rest if not a.startswith("-") and "=" in a]
    args.argv = list(sys.argv[1:] if argv is None else argv)
    limits = dict(scale["limits"])
    for item in args.external_limit:
        name, _, n = item.partition("=")
        if name not in EXTERNAL_NAMES or not n.isdigit() or int(n) < 1:
            raise SystemExit(
                f"--external-limit {item!r}: give NAME=N with NAME one of {EXTERNAL_NAMES}, N >= 1"
            )
        limits[name] = int(n)
    args.limits = limits
    if not args.seeds:
        raise SystemExit("--seeds: give at least one training seed")
    return args


def seed_args(args: argparse.Namespace, seed: int) -> tuple[argparse.Namespace, v2.Oracle]:
    """coevolution_v2's arguments of one training seed (its own folders under ``--runs``)."""
    folder = Path(args.runs) / f"seed{seed}"
    argv = [*PRESET, *args.v2_flags, "--modes", *args.modes, "--seed", str(seed), "--jobs", str(args.jobs),
            "--runs", str(folder), "--results", str(folder / "v2"), *PRESET_OVERRIDES, *args.v2_overrides]  # fmt: skip
    return v2.parse(argv)


def chosen_externals(args: argparse.Namespace, families: list[str], cuts: tuple[str, ...] = ()) -> dict:
    """The external benchmarks to evaluate: ``--external`` less the plan's cuts, with ``--external-limit``;
    a benchmark with no local copy is left out (listed by :func:`unavailable`)."""
    out = {}
    for name, ext in externals(families).items():
        group = "heldout" if name.startswith("heldout_") else name
        if group not in args.external or group in cuts or name in unavailable(args, families):
            continue
        limit = args.limits.get(group, ext.limit)
        out[name] = External(ext.label, limit, ext.selection, ext.code, ext.hub, ext.family)
    return out


def unavailable(args: argparse.Namespace, families: list[str]) -> list[str]:
    """External hub benchmarks named by ``--external`` with no local copy: none placed (under
    ``$METAAGENT_BENCHMARKS_DIR`` or the checkout's ``shared/benchmarks``) and none shipped in the package
    (GSM8K's test split and MBPP are), so evaluating them would need the hub."""
    def local(label: str) -> bool:
        name, _, split = label.partition(":")
        return (placed_copy(name, split) or shipped_copy(name, split)) is not None

    return [n for n, e in externals(families).items() if e.hub and n in args.external and not local(e.label)]


def methods_of(ext: External, a2=None, mode: str | None = None) -> tuple[str, ...]:
    """Held-out methods on an external benchmark: ``auto``, ``sa`` and the baselines that apply (the sa+grpo
    checkpoint under ``--sa-grpo-ks``: sa and its sa@k)."""
    if mode == SA_GRPO and a2 is not None and a2.sa_grpo_ks:
        return v2.sa_grpo_methods(a2)
    out = ["auto", "sa", "sa@auto"]
    out += [] if ext.code else ["fixed:pot"]
    out += ["best-per-domain"] if ext.selection else []
    return tuple(out)


# ---- running -------------------------------------------------------------------------------------------------


def external_dir(args: argparse.Namespace, seed: int, mode: str) -> Path:
    if mode == START:
        return Path(args.runs) / "start" / "external"
    return Path(args.runs) / f"seed{seed}" / f"heldout_{mode}" / "external"


def external_evaluations(args, a2, oracle, seed: int, mode: str, chosen: dict) -> list:
    """One ``metaagent-eval`` call per external benchmark (zero-argument calls for train_round_robin)."""

    def one(name: str, ext: External) -> None:
        sub = argparse.Namespace(
            **{**vars(a2), "eval_limit": ext.limit, "seed": 0 if mode == START else seed}
        )
        extra = ["--dtype", a2.dtype]
        methods = methods_of(ext, a2, mode)
        if ext.selection and "best-per-domain" in methods:
            extra += ["--selection-split", ext.selection, "--best-of", *v2.best_of(oracle, ext.family, a2.best_of_top)]
        v1.evaluate(sub, mode, benchmarks=(ext.label,), methods=methods,
                    out=external_dir(args, seed, mode) / name, extra=tuple(extra))  # fmt: skip

    return [lambda name=name, ext=ext: one(name, ext) for name, ext in chosen.items()]


def expected_folders(args: argparse.Namespace, seed: int, mode: str, families: list[str]) -> list[Path]:
    """The held-out evaluation folders of one (seed, mode) under ``--runs`` (mode ``start``: the start model's)."""
    if mode == START:
        held = Path(args.runs) / f"seed{args.seeds[0]}" / "heldout_start"
        ext = external_dir(args, 0, START)
    else:
        held = Path(args.runs) / f"seed{seed}" / f"heldout_{mode}"
        ext = held / "external"
    suite = [] if args.no_suite else [held / "evals" / f for f in families]
    return suite + [ext / n for n in chosen_externals(args, families)]


def evaluated(args: argparse.Namespace, seed: int, mode: str, families: list[str], steps: int) -> bool:
    """Whether one (seed, mode) is neither trained nor evaluated again: every held-out evaluation complete,
    live under ``--runs`` or committed under ``<results>/records``, and its run not behind ``steps``: it has
    them, or it has no training under ``--runs`` (restored from ``records/``: a new machine, its checkpoint
    gone, never trained again; the start model is never trained). A live run behind ``steps`` (raised after
    its evaluations) trains on: its evaluations are of an earlier checkpoint."""
    import lzma

    runs, records = Path(args.runs), Path(args.results) / "records"
    if 0 < v1.steps_done(runs / f"seed{seed}" / mode) < steps:
        return False
    for f in expected_folders(args, seed, mode, families):
        live, kept = f / "results.json", records / f.relative_to(runs) / "results.json.xz"
        if live.is_file():
            result = json.loads(live.read_text())
        elif kept.is_file():
            result = json.loads(lzma.decompress(kept.read_bytes()))
        else:
            return False
        if not result.get("complete"):
            return False
    return True


def restore_records(args: argparse.Namespace, families: list[str]) -> set[tuple[int, str]]:
    """Cross-session resume. A new session starts on a new machine: the runs folder and its checkpoints are gone,
    the committed summaries (``<results>/records``) are not. Every (seed, mode) whose committed held-out
    summaries are all complete gets them back into ``--runs`` as ``results.json`` and is neither trained nor
    evaluated again; the committed records of a (seed, mode) that is not complete belong to a checkpoint that is
    lost, so they are dropped (git keeps them) and the run starts over. Returns the complete (seed, mode) pairs
    (mode ``start``: the start model's evaluations, which are re-run where incomplete)."""
    import lzma
    import shutil

    results = Path(args.results)
    runs = Path(args.runs)

    def committed(folder: Path) -> Path:
        return results / "records" / folder.relative_to(runs)

    done = set()
    for seed in args.seeds:
        for mode in (START, *args.modes) if seed == args.seeds[0] else args.modes:
            folders = expected_folders(args, seed, mode, families)
            have = {f: committed(f) / "results.json.xz" for f in folders}
            if not any(x.is_file() for x in have.values()):
                continue
            live = [f for f in folders if (f / "results.json").is_file()]
            loaded = {f: json.loads(lzma.decompress(x.read_bytes())) for f, x in have.items() if x.is_file()}
            if len(loaded) == len(folders) and all(r.get("complete") for r in loaded.values()):
                for f, r in loaded.items():
                    if not (f / "results.json").is_file():
                        f.mkdir(parents=True, exist_ok=True)
                        (f / "results.json").write_text(json.dumps(r))
                done.add((seed, mode))
            elif mode != START and not live:  # a lost checkpoint's partial records
                print(f"evidence: seed {seed} {mode}: committed records incomplete and the checkpoint is gone; "
                      "dropping them and training again", flush=True)  # fmt: skip
                shutil.rmtree(committed(runs / f"seed{seed}" / f"heldout_{mode}"), ignore_errors=True)
    return done


def run(args: argparse.Namespace, cuts: tuple[str, ...]) -> None:
    """Every seed in turn: train its modes and run its held-out evaluations (the start model's with the first
    seed), rewriting the report after each chunk; everything resumes, across sessions too (the committed
    complete evaluations: :func:`restore_records`). The command goes into COMMAND.md first."""
    write_command(args)
    families = seed_args(args, args.seeds[0])[0].families
    done = restore_records(args, families)
    for i, seed in enumerate(args.seeds):
        a2, oracle = seed_args(args, seed)
        chosen = chosen_externals(args, a2.families, cuts)
        a2.modes = [m for m in a2.modes if (seed, m) not in done]
        if args.only_start:
            a2.modes = []

        def suite(mode: str, a2=a2, oracle=oracle) -> list:
            return [] if args.no_suite else v2.evaluations(a2, oracle, mode)

        evals = {}  # the trained checkpoints' evaluations first: theirs cannot wait for a later session
        for mode in a2.modes:
            skip = "stagewise-external" in cuts and mode == "stagewise"
            evals[mode] = suite(mode) + (
                [] if skip else external_evaluations(args, a2, oracle, seed, mode, chosen)
            )
        if i == 0 and (seed, START) not in done:  # the start model exists in every session
            evals[START] = suite(START) + external_evaluations(args, a2, oracle, 0, START, chosen)
        os.environ.setdefault("PYTHONPATH", str(ROOT))
        if args.refresh:
            a2.refresh_only = True
            v1.run_jobs(args.jobs, [call for calls in evals.values() for call in calls])
            continue
        v1.train_round_robin(a2, lambda: report(args), evals)
        report(args)
        if args.only_start:
            return


def main() -> None:
    args = parse()
    if args.plan:
        print("\n".join(plan(args).lines))
        write_status(args)
        return
    if args.refresh and not args.report_only:
        raise SystemExit("--refresh re-tables what exists: give it with --report-only")
    if not args.report_only or args.refresh:
        run(args, plan(args).cuts)
    report(args)


# ---- the compute plan ----------------------------------------------------------------------------------------


@dataclass
class Plan:
    lines: list[str]
    cuts: tuple[str, ...]
    hours: float


def measured_step_s(args: argparse.Namespace) -> tuple[float, str]:
    """Seconds a step: ``--step-s``, else the mean of every step trained here so far, else the committed one."""
    times = []
    for seed in args.seeds:
        for mode in args.modes:
            times += _report.step_times(v1.read_metrics(Path(args.runs) / f"seed{seed}" / mode))
    return _report.rate(
        args.step_s, times, given_basis="given (--step-s)", measured_basis="measured here: the mean of {n} steps",
        prior=COMMITTED_STEP_S,
        prior_basis="the five-family run's committed mean of 160 steps, on an AVX2 host (none here yet)",
    )  # fmt: skip


def measured_eval_rate(args: argparse.Namespace) -> tuple[float, str]:
    """Records (task x method) a minute: ``--eval-rate``, else the prior (:data:`PRIOR_EVAL_RATE`)."""
    return _report.rate(
        args.eval_rate, [], given_basis="given (--eval-rate; measured as COMMAND.md says)", measured_basis="",
        prior=PRIOR_EVAL_RATE,
        prior_basis="the structure matrix's 4.6 a minute at n = 4, doubled for n = 2 (not measured here)",
    )  # fmt: skip


def checkpoint_records(a2, oracle, chosen: dict, external: bool = True, mode: str | None = None) -> int:
    """About the records one checkpoint's held-out evaluations write: per benchmark, tasks x (the methods that
    generate on the scored split, best-per-domain's candidates among them, plus the candidates again on its
    selection split, taken with the same task limit); ``sa@auto`` is a method of its own."""
    if mode == SA_GRPO and a2.sa_grpo_ks:
        per_task = len(v2.sa_grpo_methods(a2))
        return per_task * (a2.eval_limit * len(a2.families) + sum(e.limit for e in chosen.values() if external))
    total = 0
    for f in a2.families:
        methods = set(v2.Oracle.eval_methods(oracle, f)) | set(v2.baseline_methods(a2, oracle, f))
        cands = set(v2.best_of(oracle, f, a2.best_of_top)) if a2.baselines else set()
        total += a2.eval_limit * (len((methods - {"best-per-domain"}) | cands) + len(cands))  # test, then val
    for ext in chosen.values() if external else ():
        cands = set(v2.best_of(oracle, ext.family, a2.best_of_top)) if ext.selection else set()
        total += ext.limit * (len((set(methods_of(ext)) - {"best-per-domain"}) | cands) + len(cands))
    return total


def estimate(args, a2, oracle, cuts: tuple[str, ...], step_s: float, rate: float) -> tuple[float, float, int]:
    """(training machine-hours, evaluation machine-hours, records) of the whole experiment under ``cuts``."""
    modes = [m for m in args.modes if not (m == "coupled" and "coupled" in cuts)]
    steps_left = 0
    finished = {(s, m) for s in args.seeds for m in modes if evaluated(args, s, m, a2.families, a2.steps)}
    for seed in args.seeds:
        for mode in modes:
            if (seed, mode) not in finished:
                steps_left += max(0, a2.steps - v1.steps_done(Path(args.runs) / f"seed{seed}" / mode))
    chunks = math.ceil(steps_left / (a2.chunk or a2.save_every))
    train_h = _report.train_hours(steps_left, chunks, step_s, v2.PRIOR_CHUNK_S)
    chosen = chosen_externals(args, a2.families, cuts)
    # records still to write: the start model's, then each (seed, mode) not yet evaluated
    start_done = evaluated(args, args.seeds[0], START, a2.families, a2.steps)
    records = 0 if start_done else checkpoint_records(a2, oracle, chosen)
    for mode in modes:
        ext = not ("stagewise-external" in cuts and mode == "stagewise")
        left = sum((seed, mode) not in finished for seed in args.seeds)
        records += left * checkpoint_records(a2, oracle, chosen, ext, mode)
    return train_h, _report.eval_hours(records, a2.eval_n, rate), records


CUT_ORDER = ("mbpp", "coupled", "stagewise-external")  # issue 61 item 4; never the seeds or the baselines


def plan(args: argparse.Namespace) -> Plan:
    """The compute plan: runs x steps x step time, records x rate, machine-hours, 2.5-h sessions at
    ``--jobs``; with ``--budget-hours`` the cuts of :data:`CUT_ORDER` until it fits."""
    a2, oracle = seed_args(args, args.seeds[0])
    step_s, step_basis = measured_step_s(args)
    rate, rate_basis = measured_eval_rate(args)
    cuts: tuple[str, ...] = ()
    train_h, eval_h, records = estimate(args, a2, oracle, cuts, step_s, rate)
    for cut in CUT_ORDER:
        if not args.budget_hours or train_h + eval_h <= args.budget_hours:
            break
        cuts = (*cuts, cut)
        train_h, eval_h, records = estimate(args, a2, oracle, cuts, step_s, rate)
    total = train_h + eval_h
    runs = len(args.seeds) * len([m for m in args.modes if not (m == "coupled" and "coupled" in cuts)])
    fits = not args.budget_hours or total <= args.budget_hours
    lines = [
        f"Plan: {runs} training runs (seeds {' '.join(map(str, args.seeds))} x {', '.join(args.modes)}) x "
        f"{a2.steps} steps x {step_s:.0f} s a step ({step_basis}), plus {v2.PRIOR_CHUNK_S:.0f} s a chunk: "
        f"{train_h:.1f} machine-hours of training left;",
        f"{records} held-out records (task x method; the start model and each final checkpoint; n = {a2.eval_n}) "
        f"x {rate:.1f} records a minute ({rate_basis}): {eval_h:.1f} machine-hours;",
        _report.sessions_line(total, args.jobs, SESSION_H),
        f"Budget: {args.budget_hours or 'none'} machine-hours; cuts (issue order {', '.join(CUT_ORDER)}): "
        f"{', '.join(cuts) or 'none'}"
        + (
            ""
            if fits
            else "; it does not fit even after every allowed cut (seeds and baselines are never cut)"
        )
        + ".",
    ]
    missing = unavailable(args, a2.families)
    if missing:
        lines.append(
            f"No local copy (none placed under $METAAGENT_BENCHMARKS_DIR, none shipped with the package), so "
            f"not evaluated: {', '.join(missing)}."
        )
    return Plan(lines, cuts, total)


# ---- records -------------------------------------------------------------------------------------------------


def read_results(folder: Path) -> dict | None:
    path = folder / "results.json"
    return json.loads(path.read_text()) if path.is_file() else None


def entry(results: dict | None, bench: str, method: str) -> dict | None:
    """A method's entry on a benchmark in a one-cell results.json (None: absent). ``sa@auto`` is stored under
    its k (``sa@auto (k=2)`` or ``sa@2``): the first method name starting with ``sa@`` other than ``sa@=``."""
    if not results:
        return None
    cell = next(iter(results["cells"].values()))
    methods = cell["benchmarks"].get(bench, {})
    if method in methods:
        return methods[method]
    if method == "sa@auto":
        named = [m for m in methods if m.startswith("sa@")]
        return methods[named[0]] if named else None
    return None


def scores(e: dict | None) -> list:
    from metaagent.eval import TaskScore

    return [TaskScore.from_dict(t) for t in (e or {}).get("per_task", []) if isinstance(t, dict)]


def mean_avg(e: dict | None, k: int) -> float | None:
    vals = [s.avg.get(k) for s in scores(e) if s.avg.get(k) is not None]
    return sum(vals) / len(vals) if vals else None


def rows_of(args: argparse.Namespace, families: list[str]) -> list[tuple[str, str, str]]:
    """(row name, benchmark label, folder kind: ``evals/<family>`` or ``external/<name>``) of every table row."""
    rows = [(f, f"suite_{f}:test", f"evals/{f}") for f in families]
    rows += [(n, e.label, f"external/{n}") for n, e in chosen_externals(args, families).items()]
    return rows


def checkpoint_results(args: argparse.Namespace, seed: int, mode: str, kind: str) -> dict | None:
    if mode == START:
        first = args.seeds[0]
        folder = (Path(args.runs) / f"seed{first}" / "heldout_start" / kind if kind.startswith("evals/")
                  else external_dir(args, 0, START) / kind.split("/", 1)[1])  # fmt: skip
    else:
        folder = Path(args.runs) / f"seed{seed}" / f"heldout_{mode}" / kind
    return read_results(folder)


def baseline_candidates(args, seed: int, mode: str, bench: str, kind: str) -> dict[str, dict]:
    """The baselines ``auto`` of (seed, mode) is judged against on one row: its own checkpoint's ``sa@auto``,
    ``fixed:pot``, ``best-per-domain``, and the same seed's sa+grpo checkpoint's ``sa`` and ``sa@auto``."""
    own = checkpoint_results(args, seed, mode, kind)
    out = {m: entry(own, bench, m) for m in ("sa@auto", "fixed:pot", "best-per-domain")}
    grpo = checkpoint_results(args, seed, SA_GRPO, kind) if SA_GRPO in args.modes else None
    out["sa+grpo sa"] = entry(grpo, bench, "sa")
    calls = ((entry(own, bench, "auto") or {}).get("budget") or {}).get("agent_calls_per_sample")
    name, e = matched_sa_at_k(grpo, bench, calls)
    out[f"sa+grpo {name}"] = e
    return {name: e for name, e in out.items() if e and scores(e)}


def matched_sa_at_k(results: dict | None, bench: str, calls: float | None) -> tuple[str, dict | None]:
    """The sa+grpo checkpoint's one-agent-at-equal-compute entry for an ``auto`` of ``calls`` executor calls a
    sample: the ``sa@k`` of the least k >= calls (else the largest k run), or its ``sa@auto``; (name, entry)."""
    if not results:
        return "sa@auto", None
    methods = next(iter(results["cells"].values()))["benchmarks"].get(bench, {})
    ks = sorted(int(m[3:]) for m in methods if m.startswith("sa@") and m[3:].isdigit())
    if not ks or calls is None:
        return "sa@auto", entry(results, bench, "sa@auto")
    k = next((k for k in ks if k >= calls - 1e-9), ks[-1])
    return f"sa@{k}", methods[f"sa@{k}"]


# ---- the report ----------------------------------------------------------------------------------------------


def compute_text(e: dict | None) -> str:
    """``executor calls / designer calls / generated tokens`` per sample of a method's entry (``-`` without a
    budget)."""
    b = (e or {}).get("budget") or {}
    if "agent_calls_per_sample" not in b:
        return "-"
    return (f"{b['agent_calls_per_sample']:.2f} / {b.get('designer_calls_per_sample', 0.0):.2f} / "
            f"{b['tokens_per_sample']:.0f}")  # fmt: skip


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def gain_text(diff: float | None, ci: list | None) -> str:
    if diff is None:
        return "-"
    return f"{100 * diff:+.1f}" + (f" [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]" if ci else "")


def seed_gain(args, seed: int, mode: str, bench: str, kind: str) -> dict | None:
    """One seed's ``auto`` - strongest baseline on a row: the baseline with the highest mean avg@k on the
    row's tasks (named), the paired task bootstrap, and both sides' compute; None until ``auto`` and a
    baseline are in."""
    from metaagent.eval import paired_comparison

    res = checkpoint_results(args, seed, mode, kind)
    auto = entry(res, bench, "auto")
    base = baseline_candidates(args, seed, mode, bench, kind)
    if not auto or not scores(auto) or not base:
        return None
    k = res["k_main"]
    name = max(base, key=lambda m: (mean_avg(base[m], k) or -1.0, -list(base).index(m)))
    cmp = paired_comparison(scores(base[name]), scores(auto), k=k)
    if cmp["diff"] is None:
        return None
    return {"baseline": name, "diff": cmp["diff"], "ci95": cmp["ci95"], "tasks": cmp["tasks"], "k": k,
            "auto": mean_avg(auto, k), "base": mean_avg(base[name], k),
            "auto_compute": compute_text(auto), "base_compute": compute_text(base[name])}  # fmt: skip


def headline(args, families: list[str]) -> tuple[list[str], dict]:
    """table.md's headline: per designer mode and row, the mean over seeds of auto - strongest baseline with
    the t interval over seeds (metaagent.eval.across_seeds), the baseline named per seed, the compute."""
    from metaagent.eval import across_seeds

    lines, gains = [], {}
    for mode in [m for m in args.modes if m in DESIGNER_MODES]:
        lines += [f"### {mode}", "",
                  "| row | seeds in | auto - strongest baseline (mean over seeds, t 95% CI over seeds) | "
                  "strongest baseline per seed | per seed: gain [paired task bootstrap 95% CI] (tasks) | "
                  "auto exec / designer calls / tokens per sample | baseline's |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
        for row, bench, kind in rows_of(args, families):
            per = {s: g for s in args.seeds if (g := seed_gain(args, s, mode, bench, kind))}
            gains[(mode, row)] = per
            if not per:
                lines.append(f"| {row} | 0 of {len(args.seeds)} | - | - | - | - | - |")
                continue
            summary = across_seeds(per)
            note = f" ({summary['note']})" if summary.get("note") else ""
            names = ", ".join(f"s{s}: {g['baseline']}" for s, g in per.items())
            detail = ", ".join(
                f"s{s}: {gain_text(g['diff'], g['ci95'])} ({g['tasks']})" for s, g in per.items()
            )
            auto_c = ", ".join(g["auto_compute"] for g in per.values())
            base_c = ", ".join(g["base_compute"] for g in per.values())
            lines.append(f"| {row} | {len(per)} of {len(args.seeds)} | {gain_text(summary['mean'], summary['ci95'])}"
                         f"{note} | {names} | {detail} | {auto_c} | {base_c} |")  # fmt: skip
        lines.append("")
    return lines, gains


def mode_order(args, families: list[str]) -> list[str]:
    """Per seed, the designer modes ordered by their mean ``auto`` avg@k over the suite's test families (paper
    Table 4 expects stagewise >= coupled >= one-role)."""
    out = [
        "| seed | order of the designer modes by mean `auto` over the suite families (avg, %) |",
        "| --- | --- |",
    ]
    for s in args.seeds:
        means = {}
        for mode in [m for m in args.modes if m in DESIGNER_MODES]:
            vals = []
            for f in families:
                res = checkpoint_results(args, s, mode, f"evals/{f}")
                vals.append(mean_avg(entry(res, f"suite_{f}:test", "auto"), res["k_main"]) if res else None)
            if vals and None not in vals:
                means[mode] = sum(vals) / len(vals)
        order = sorted(means, key=lambda m: -means[m])
        out.append(f"| {s} | {' > '.join(f'{m} {100 * means[m]:.1f}' for m in order) or '-'} |")
    return [*out, ""]


def method_table(args, seed: int, mode: str, families: list[str]) -> list[str]:
    """One checkpoint's every method per row: avg@k (%) and calls / tokens per sample."""
    out = [
        "| row | method | avg@k (%) | tasks | exec calls / designer calls / tokens per sample |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row, bench, kind in rows_of(args, families):
        res = checkpoint_results(args, seed, mode, kind)
        if not res:
            out.append(f"| {row} | (not evaluated yet) | - | - | - |")
            continue
        cell = next(iter(res["cells"].values()))
        for method, e in cell["benchmarks"].get(bench, {}).items():
            n = len(scores(e))
            out.append(f"| {row} | {method} | {pct(mean_avg(e, res['k_main']))} (k={res['k_main']}) | {n} | "
                       f"{compute_text(e)} |")  # fmt: skip
    return [*out, ""]


def plot_gains(gains: dict, path: Path) -> bool:
    """gains.png: per (mode, row), each seed's gain with its paired task-bootstrap interval (grey) and the mean
    over seeds with its t interval (red, 2 seeds or more); False (no file) while no gain is in."""
    from metaagent.eval import across_seeds
    from metaagent.eval.html import figure, palette_png

    items = [(key, per) for key, per in gains.items() if per]
    if not items:
        return False
    fig, ax = figure((max(5.0, 0.55 * len(items) + 1.5), 3.4))
    for x, (_, per) in enumerate(items):
        for j, g in enumerate(per.values()):
            lo, hi = g["ci95"] or (g["diff"], g["diff"])
            ax.errorbar([x - 0.25 + 0.12 * j], [100 * g["diff"]], yerr=[[100 * (g["diff"] - lo)], [100 * (hi - g["diff"])]],
                        fmt="o", color="0.45", capsize=2, markersize=3)  # fmt: skip
        summary = across_seeds(per)
        if summary["ci95"]:
            m, (lo, hi) = summary["mean"], summary["ci95"]
            ax.errorbar(
                [x + 0.2],
                [100 * m],
                yerr=[[100 * (m - lo)], [100 * (hi - m)]],
                fmt="s",
                color="C3",
                capsize=3,
            )
    ax.axhline(0.0, color="0.6", linewidth=0.8)
    ax.set_xticks(range(len(items)))
    ax.set_xticklabels([f"{mode}\n{row}" for (mode, row), _ in items], fontsize=5, rotation=60)
    ax.set_ylabel("auto - strongest baseline (points)", fontsize=7)
    fig.tight_layout()
    path.write_bytes(palette_png(fig))
    return True


def content_hash(model: Path) -> str:
    """sha256 over a checkpoint's model folder: each file's path relative to it and its bytes, in path order."""
    h = hashlib.sha256()
    for f in sorted(p for p in model.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(model)).encode() + b"\0")
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def checkpoint_hashes(args: argparse.Namespace) -> dict:
    """seed -> mode -> {path, step, sha256} of each final checkpoint that exists (cached beside the run, keyed
    by the checkpoint's path, so a report does not re-read gigabytes); a run trained in an earlier session keeps
    the hash committed then (its checkpoint did not survive the machine)."""
    committed = Path(args.results) / "checkpoints.json"
    out: dict = json.loads(committed.read_text()) if committed.is_file() else {}
    for seed in args.seeds:
        for mode in args.modes:
            folder = Path(args.runs) / f"seed{seed}" / mode
            model = v1.final_model(folder)
            if model is None:
                continue
            cache = folder / "final_hash.json"
            known = json.loads(cache.read_text()) if cache.is_file() else {}
            if known.get("path") != os.path.relpath(model, args.runs):
                known = {
                    "path": os.path.relpath(model, args.runs),  # under --runs: no machine path committed
                    "step": v1.checkpoint_step(folder),
                    "sha256": content_hash(model),
                }
                cache.write_text(json.dumps(known))
            out.setdefault(str(seed), {})[mode] = known
    return out


def copy_records(args: argparse.Namespace, results: Path) -> None:
    """The held-out evaluations travel with the report, compressed (``records/start``, ``records/seed<S>/
    heldout_<mode>``): the suite's whole folders (metaagent-replay opens them), and of the external benchmarks
    only results.json and table.md (their rollouts quote the benchmark's questions, data kept in its own copy,
    shipped or placed, not in the records); never a checkpoint. ``--scale session`` keeps of the suite's
    rollouts the teams' (``auto``) only: three seeds of everything would pass the committed results' 10 MB
    budget."""
    import lzma

    def summaries(src: Path, dst: Path) -> None:
        for sub in (p for p in src.glob("*") if (p / "results.json").is_file()):
            (dst / sub.name).mkdir(parents=True, exist_ok=True)
            (dst / sub.name / "results.json.xz").write_bytes(
                lzma.compress((sub / "results.json").read_bytes())
            )
            if (sub / "table.md").is_file():
                (dst / sub.name / "table.md").write_bytes((sub / "table.md").read_bytes())

    summaries(external_dir(args, 0, START), results / "records" / "start" / "external")
    for seed in args.seeds:
        for mode in (START, *args.modes):
            held = Path(args.runs) / f"seed{seed}" / f"heldout_{mode}"
            dst = results / "records" / f"seed{seed}" / held.name / "evals"
            if (held / "evals").is_dir():
                v1.copy_compressed(held / "evals", dst)
                if args.scale == "session":  # the teams' records only (results' 10 MB budget)
                    for f in dst.rglob("*.jsonl.xz"):
                        if f.name != "auto.jsonl.xz":
                            f.unlink()
            summaries(held / "external", results / "records" / f"seed{seed}" / held.name / "external")
    scrub_paths(args, results / "records")


def scrub_paths(args: argparse.Namespace, folder: Path) -> None:
    """The plain-text copies (run.json, table.md) name the runs folder as ``<runs>``, never a machine's path (the
    compressed summaries keep theirs: they are read back by :func:`restore_records` only)."""
    prefixes = sorted({str(Path(args.runs)), os.path.realpath(args.runs)}, key=len, reverse=True)
    for f in folder.rglob("*"):
        if f.suffix in (".json", ".md") and f.is_file():
            text = f.read_text()
            new = text
            for prefix in prefixes:
                new = new.replace(prefix, "<runs>")
            if new != text:
                f.write_text(new)


def command(args: argparse.Namespace) -> str:
    skip = ("--report-only", "--plan", "--refresh")
    return "python benchmarks/evidence.py " + shlex.join(a for a in args.argv if a not in skip)


def report(args: argparse.Namespace) -> None:
    """Rewrite table.md, seed<S>.md, start.md, gains.png, checkpoints.json, COMMAND.md and STATUS.md from the
    records that exist (none, some or all)."""
    a2, _ = seed_args(args, args.seeds[0])
    families = a2.families
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    head, gains = headline(args, families)
    hashes = checkpoint_hashes(args)
    png = plot_gains(gains, results / "gains.png")
    text = [
        "# Evidence: designer-trained `auto` against the strongest baseline at equal compute",
        "",
        f"Command: `{command(args)}` (COMMAND.md). Seeds {', '.join(map(str, args.seeds))}; modes "
        f"{', '.join(args.modes)}; status in STATUS.md. avg@k in points; the strongest baseline of a seed and row is "
        "the one with the highest mean among the checkpoint's own `sa@auto` (k = its `auto`'s executor calls per "
        "sample), `fixed:pot` (answer tasks), `best-per-domain` (chosen on a split disjoint from the scored one: "
        "the suite's val, MBPP's validation; absent on GSM8K and HumanEval, which have none) and the same seed's "
        "sa+grpo checkpoint's `sa` and `sa@auto`. The headline interval is the t interval over the seeds; each "
        "seed's paired task-bootstrap interval is the detail.",
        "",
        *head,
        "## Mode order across seeds",
        "",
        *mode_order(args, families),
        f"Per-seed tables: {', '.join(f'seed{s}.md' for s in args.seeds)}; the start model: start.md; "
        + (
            "gains.png (per-seed gains, grey, with the mean over seeds, red)."
            if png
            else "no gains.png yet (no gain is in)."
        ),
        "",
    ]
    (results / "table.md").write_text("\n".join(text))
    for seed in args.seeds:
        body = [f"# Seed {seed}", ""]
        for mode in args.modes:
            h = hashes.get(str(seed), {}).get(mode)
            body += [
                f"## {mode}"
                + (f" (step {h['step']}, sha256 {h['sha256'][:16]})" if h else " (no checkpoint yet)"),
                "",
            ]
            body += method_table(args, seed, mode, families)
        (results / f"seed{seed}.md").write_text("\n".join(body))
    start = [
        f"# The start model ({a2.model}, evaluation seed 0)",
        "",
        *method_table(args, 0, START, families),
    ]
    (results / "start.md").write_text("\n".join(start))
    (results / "checkpoints.json").write_text(json.dumps(hashes, indent=1) + "\n")
    copy_records(args, results)
    write_command(args)
    write_status(args)


def evaluations_in(folder: Path) -> str:
    """``name`` (complete), ``name (R records)`` (started), for each evaluation folder under ``folder``."""
    from metaagent.records import glob_records, read_record_lines

    out = []
    for sub in sorted(p for p in folder.glob("*") if p.is_dir()):
        res = read_results(sub)
        if res and res.get("complete"):
            out.append(sub.name)
            continue
        files = glob_records(sub / "rollouts", "*/*/*.jsonl")
        n = sum(len([x for x in read_record_lines(f)[0] if x.strip()]) for f in files)
        out.append(f"{sub.name} ({n} records, running or stopped)")
    return ", ".join(out) or "-"


def write_status(args: argparse.Namespace) -> None:
    """STATUS.md: PARTIAL until every (seed, mode) is :func:`evaluated` (its steps and every evaluation
    complete, or restored from ``records/``); the plan; per seed x mode the steps done and the evaluations in;
    how to continue in the background."""
    a2, _ = seed_args(args, args.seeds[0])
    the_plan = plan(args)
    rows, done = [], True
    start_suite = Path(args.runs) / f"seed{args.seeds[0]}" / "heldout_start" / "evals"
    start_row = (
        f"suite: {evaluations_in(start_suite)}; external: {evaluations_in(external_dir(args, 0, START))}"
    )
    for seed in args.seeds:
        for mode in args.modes:
            steps = v1.steps_done(Path(args.runs) / f"seed{seed}" / mode)
            held = Path(args.runs) / f"seed{seed}" / f"heldout_{mode}"
            suite, ext = evaluations_in(held / "evals"), evaluations_in(held / "external")
            finished = evaluated(args, seed, mode, a2.families, a2.steps)  # live, or restored from records/
            done &= finished
            trained = f"{steps} of {a2.steps}"
            if finished and not steps:  # its training is gone from --runs
                trained = f"{a2.steps} of {a2.steps} (restored from records/)"
            rows.append(f"| {seed} | {mode} | {trained} | {suite} | {ext} |")
    _report.write_status(
        args.results,
        title="Evidence",
        done=done,
        plan=the_plan.lines,
        runs=[
            f"Runs folder: `{_report.home_short(args.runs)}` (outside the work tree, so a new checkout keeps the "
            "checkpoints; a new machine does not: there a (seed, mode) whose committed evaluations are complete is "
            "restored from `records/` and never trained again, and an unfinished one starts over).",
            f"Start model ({a2.model}): {start_row}. Its tables: start.md; executions read by hand: READING.md.",
        ],
        columns=("seed", "mode", "steps", "suite test evaluations in", "external evaluations in"),
        rows=rows,
        how_title="How to continue",
        how=[
            "From the repository root with `PYTHONPATH=$PWD HF_HUB_OFFLINE=1 .venv/bin/python` (GSM8K and",
            "MBPP ship with the package; a placed copy under $METAAGENT_BENCHMARKS_DIR takes priority);",
            "rerunning continues every run and evaluation where it stopped:",
        ],
        command=command(args),
        log=_report.home_short(Path(args.runs) / "evidence.log"),
    )  # fmt: skip


def write_command(args: argparse.Namespace) -> None:
    """COMMAND.md: this report's command (kept with every earlier distinct one: the commands that wrote the
    records)."""
    path = Path(args.results) / "COMMAND.md"
    path.parent.mkdir(parents=True, exist_ok=True)  # a run's first write, before any report
    header = ["# Commands", "", "Each ran from the repository root with `PYTHONPATH=$PWD HF_HUB_OFFLINE=1 "
              "OMP_NUM_THREADS=1 .venv/bin/python` (GSM8K and MBPP ship with the package; a placed copy under "
              "$METAAGENT_BENCHMARKS_DIR takes priority):", ""]  # fmt: skip
    old = path.read_text().splitlines() if path.is_file() else header
    line = f"    {command(args)}"
    if line not in old and not args.report_only and not args.plan:
        old += [line, ""]
    path.write_text("\n".join(old).rstrip("\n") + "\n")


if __name__ == "__main__":
    main()
