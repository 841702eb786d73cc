"""Probe for a task family that one agent serves best (the suite property issue #42 still misses).

A family is best served by a single agent only if *every* team is below `sa` there. Majority voting over the same
model (`fixed:self_consistency`) falls below one agent only where the model's most common answer is wrong while the
right one still comes up; a coder whose program is run (`fixed:tool_pair`) reads the question differently from the
single agent. This probe asks small questions about two or three stated numbers, one of which is asked for (an
earlier or later state, a negation, the same noun for two people, the middle of three days), so that the single
agent's most common answer can be the wrong number, runs `sa` and the team templates on them with
`embedded-sft-suite` (the executor co-evolution v2 starts from) and tabulates, per kind, each method's avg@k, its
paired difference to `sa` (bootstrap 95% CI over the kind's tasks) and which number `sa`'s answers name.

Batches b1-b3 are the probe (8 tasks a kind, as they were run: each batch's tasks come from its own seed, its
methods and n are in ``BATCHES``); c1 and c2 measure again, on 30 fresh tasks with every math template, the two
kinds where `sa` led every team the probe measured. Results and their reading:
``benchmarks/results/structure_matrix/one_agent_probe/STATUS.md``.

    python benchmarks/one_agent_probe.py --out benchmarks/results/structure_matrix/one_agent_probe   # resumes
    python benchmarks/one_agent_probe.py --out ... --report-only    # table.md from the records
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from statistics import fmean

from metaagent.eval.metrics import paired_bootstrap_ci
from metaagent.lazy import import_file
from metaagent.records import RECORD_SUFFIX, iter_trees
from metaagent.rewards.math import extract_answer

ROOT = Path(__file__).resolve().parents[1]


#: scripts/suite_families.py (the suite's generators and their word lists), loaded from its file
_families = import_file(ROOT / "scripts" / "suite_families.py", "suite_families")
ANIMALS, GOODS, NAMES, START_QUESTION = _families.ANIMALS, _families.GOODS, _families.NAMES, _families.START_QUESTION

MODEL = "embedded-sft-suite"
EVAL_FLAGS = [
    "--model", MODEL, "--dtype", "bfloat16", "--seed", "0", "--temperature", "0.7", "--designer-max-tokens", "384",
    "--executor-max-tokens", "192", "--concurrency", "16", "--continuous", "--sandbox-workers", "2", "--no-html",
]  # fmt: skip

Row = dict

# ---- the kinds of questions and the batches, as generated for the runs (seeds and draw order fix the tasks) -----

#: what one question draws, in this order, from the batch's random stream
DRAWS: dict[str, Callable[[random.Random], dict]] = {
    "name+goods+2": lambda r: dict(n=r.choice(NAMES), g=r.choice(GOODS)[0], ab=r.sample(range(3, 40), 2)),
    "goods+2": lambda r: dict(g=r.choice(GOODS)[0], ab=r.sample(range(3, 40), 2)),
    "2names+animal+2": lambda r: dict(pp=r.sample(NAMES, 2), an=r.choice(ANIMALS), ab=r.sample(range(3, 40), 2)),
    "name+goods+3": lambda r: dict(n=r.choice(NAMES), g=r.choice(GOODS)[0], ab=r.sample(range(3, 40), 3)),
}
#: kind -> (draws, question with the drawn numbers as {x0}, {x1}, {x2}, index of the number asked for)
KINDS: dict[str, tuple[str, str, int]] = {
    "earlier": ("name+goods+2", "{n} had {x0} {g} in the morning. By evening {n} had {x1} {g}. "
                "How many {g} did {n} have in the morning?", 0),
    "later": ("name+goods+2", "{n} had {x1} {g} in the morning. By evening {n} had {x0} {g}. "
              "How many {g} did {n} have in the evening?", 0),
    "samenoun_first": ("2names+animal+2", "{p0} has {x0} {an} and {p1} has {x1} {an}. "
                       "How many {an} does {p0} have?", 0),
    "not": ("name+goods+2", "{n} has {x0} {g}, not {x1}. How many {g} does {n} have?", 0),
    "monday": ("name+goods+2", "{n} had {x0} {g} on Monday. On Tuesday {n} sold some and had {x1} {g} left. "
               "How many {g} did {n} have on Monday?", 0),
    "start": ("name+goods+2", START_QUESTION, 0),  # the suite's start family
    "before": ("goods+2", "Before the sale, the shop had {x0} {g}. After the sale it had {x1} {g}. "
               "How many {g} did the shop have before the sale?", 0),
    "lastweek": ("name+goods+2", "Last week {n}'s shelf held {x0} {g}. Now it holds {x1} {g}. "
                 "How many {g} did the shelf hold last week?", 0),
    "noon": ("name+goods+3", "{n} had {x0} {g} in the morning, {x1} {g} at noon and {x2} {g} in the evening. "
             "How many {g} did {n} have at noon?", 1),
    "tuesday": ("name+goods+3", "On Monday {n} had {x0} {g}. On Tuesday {n} had {x1} {g}. On Wednesday {n} had "
                "{x2} {g}. How many {g} did {n} have on Tuesday?", 1),
}  # fmt: skip
MATH_TEMPLATES = ["fixed:single_math", "fixed:reflection", "fixed:ensemble_judge", "fixed:self_consistency",
                  "fixed:debate", "fixed:tool_pair"]  # fmt: skip
#: batch -> (id prefix, seed, rounds, kinds drawn in each round, [(evaluation folder, methods, n), ...]), as run
#: on 2026-11-29. c1 was fixed after b3 (``noon``: `sa` 18.8, self-consistency 18.8, tool-pair 0.0), c2 after b2's
#: teams and while c1 ran (``start``: `sa` 21.9, self-consistency 0.0, tool-pair 3.1): the same question on 30
#: fresh tasks, every math template of the structure matrix, before either ran.
BATCHES = {
    "b1": ("probe", 7, 8, ["earlier", "later", "samenoun_first", "not"],
           [("sa", ["sa"], 8), ("teams", ["fixed:tool_pair", "fixed:reflection"], 4),
            ("sc", ["fixed:self_consistency"], 4)]),
    "b2": ("p2", 11, 8, ["monday", "start", "before", "lastweek"],
           [("sa", ["sa"], 8), ("teams", ["fixed:tool_pair", "fixed:self_consistency"], 4)]),
    "b3": ("p3", 23, 8, ["noon", "tuesday"], [("all", ["sa", "fixed:tool_pair", "fixed:self_consistency"], 4)]),
    "c1": ("c1", 101, 30, ["noon"], [("all", ["sa", *MATH_TEMPLATES], 4)]),
    "c2": ("c2", 102, 30, ["start"], [("all", ["sa", *MATH_TEMPLATES], 4)]),
}  # fmt: skip


def batch_rows(name: str) -> list[Row]:
    """The batch's tasks: ``rounds`` times one question of each of its kinds, drawn from ``Random(seed)``."""
    prefix, seed, rounds, kinds, _ = BATCHES[name]
    r, rows = random.Random(seed), []
    for i in range(rounds):
        for kind in kinds:
            draws, question, asked = KINDS[kind]
            v = DRAWS[draws](r)
            names = {f"p{j}": p for j, p in enumerate(v.pop("pp", []))}
            numbers = {f"x{j}": x for j, x in enumerate(v.pop("ab"))}
            rows.append({"id": f"{prefix}-{kind}-{i:02d}", "domain": "math",
                         "question": question.format(**v, **names, **numbers), "answer": str(numbers[f"x{asked}"]),
                         "split": "test", "source": "probe", "metadata": {"kind": kind}})  # fmt: skip
    return rows


def write_tasks(out: Path) -> dict[str, Path]:
    files = {}
    for name in BATCHES:
        path = out / "tasks" / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(row) + "\n" for row in batch_rows(name)), encoding="utf-8")
        files[name] = path
    return files


def run(out: Path, files: dict[str, Path]) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    for name, (*_, evals) in BATCHES.items():
        for folder, methods, n in evals:
            cmd = [sys.executable, "-m", "metaagent.cli.eval", *EVAL_FLAGS, "--n", str(n), "--k", "1", str(n),
                   "--methods", *methods, "--benchmarks", f"suite:test@{files[name]}",
                   "--out", str(out / "evals" / f"{name}_{folder}")]  # fmt: skip
            print("+", " ".join(cmd[1:]), flush=True)
            subprocess.run(cmd, env=env, check=True, cwd=ROOT)


# ---- the report -------------------------------------------------------------------------------------------------


def _group(task_id: str) -> str:
    """``probe-earlier-03`` -> ``probe-earlier``: a batch's kind (the confirmation repeats a probe kind)."""
    return task_id.rsplit("-", 1)[0]


def read_scores(out: Path) -> tuple[dict, dict]:
    """(group, method) -> {task id: [correct per sample]}, and task id -> (question numbers, gold, sa answers)."""
    scores: dict[tuple[str, str], dict[str, list[float]]] = {}
    sa_answers: dict[str, tuple[list[int], str, list[str | None]]] = {}
    for path in sorted((out / "evals").glob(f"*/rollouts/**/*{RECORD_SUFFIX}*")):
        for tree in iter_trees(path):
            method = tree.config["eval"]["method"]  # the record's own: sa, fixed:<template>
            executions = [e for _, e in tree.executions()]
            scores.setdefault((_group(tree.task_id), method), {})[tree.task_id] = [
                e.reward.correct for e in executions
            ]
            if method == "sa":
                nums = [int(x) for x in re.findall(r"\d+", tree.task["question"])]
                answers = [extract_answer(e.answer) if e.answer else None for e in executions]
                sa_answers[tree.task_id] = (nums, str(tree.task["answer"]), answers)
    return scores, sa_answers


def report(out: Path) -> str:
    """One row per batch and kind: avg@n of each method (points), its paired difference to `sa` with a bootstrap
    95% CI over the tasks, the best measured method, and what `sa`'s answers name."""
    scores, sa_answers = read_scores(out)
    groups = list(dict.fromkeys(_group(row["id"]) for name in BATCHES for row in batch_rows(name)))
    methods = ["sa", *MATH_TEMPLATES]
    measured = [m for m in methods if any((g, m) in scores for g in groups)]
    batch_of = {prefix: name for name, (prefix, *_) in BATCHES.items()}
    lines = [
        "| batch | kind | tasks | " + " | ".join(f"`{m}`" for m in measured) + " | best measured | `sa`'s answers:"
        " the asked-for number / another stated number / something else |",
        "| --- | --- | ---: | " + " | ".join("---" for _ in measured) + " | --- | --- |",
    ]
    for group in groups:
        base = scores.get((group, "sa"))
        if not base:
            continue
        ids = sorted(base)
        cells, best = [], ("sa", fmean(fmean(base[t]) for t in ids))
        for m in measured:
            got = scores.get((group, m))
            if got is None or sorted(got) != ids:
                cells.append("—" if got is None else f"{len(got)}/{len(ids)} tasks")
                continue
            mean = fmean(fmean(got[t]) for t in ids)
            if m == "sa":
                cells.append(f"{100 * mean:.1f}")
                continue
            diff, low, high = paired_bootstrap_ci([fmean(base[t]) for t in ids], [fmean(got[t]) for t in ids])
            cells.append(f"{100 * mean:.1f} ({100 * diff:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}])")
            best = max(best, (m, mean), key=lambda x: x[1])
        named = [0, 0, 0]
        for t in ids:
            nums, gold, answers = sa_answers[t]
            for a in answers:
                stated = a is not None and a.isdigit() and int(a) in nums
                named[0 if a == gold else 1 if stated else 2] += 1
        prefix, kind = group.split("-", 1)
        lines.append(f"| {batch_of[prefix]} | {kind} | {len(ids)} | " + " | ".join(cells) + f" | `{best[0]}` | "
                     + " / ".join(map(str, named)) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of the tasks, evaluations and table.md")
    parser.add_argument("--report-only", action="store_true", help="only rewrite table.md from the records")
    args = parser.parse_args()
    if not args.report_only:
        run(args.out, write_tasks(args.out))
    table = report(args.out)
    (args.out / "table.md").write_text(table, encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
