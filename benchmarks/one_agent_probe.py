"""Probe for a task family that one agent serves best (issue #42's missing suite property), and why none is found.

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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from metaagent.eval.metrics import paired_bootstrap_ci  # noqa: E402
from metaagent.records import RECORD_SUFFIX, iter_trees  # noqa: E402
from metaagent.rewards.math import extract_answer  # noqa: E402
from suite_families import ANIMALS, GOODS, NAMES  # noqa: E402

MODEL = "embedded-sft-suite"
EVAL_FLAGS = [
    "--model", MODEL, "--dtype", "bfloat16", "--seed", "0", "--temperature", "0.7", "--designer-max-tokens", "384",
    "--executor-max-tokens", "192", "--concurrency", "16", "--continuous", "--sandbox-workers", "2", "--no-html",
]  # fmt: skip

Row = dict
Add = Callable[[str, str, int], None]


# ---- the three batches of tasks, as generated for the runs (their seeds and call order fix the tasks) --------


def _batch1(r: random.Random, add: Add) -> None:
    for _ in range(8):
        n, g = r.choice(NAMES), r.choice(GOODS)[0]
        a, b = r.sample(range(3, 40), 2)
        add("earlier", f"{n} had {a} {g} in the morning. By evening {n} had {b} {g}. "
            f"How many {g} did {n} have in the morning?", a)  # fmt: skip
        n, g = r.choice(NAMES), r.choice(GOODS)[0]
        a, b = r.sample(range(3, 40), 2)
        add("later", f"{n} had {b} {g} in the morning. By evening {n} had {a} {g}. "
            f"How many {g} did {n} have in the evening?", a)  # fmt: skip
        p1, p2 = r.sample(NAMES, 2)
        an = r.choice(ANIMALS)
        a, b = r.sample(range(3, 40), 2)
        add("samenoun_first", f"{p1} has {a} {an} and {p2} has {b} {an}. How many {an} does {p1} have?", a)
        n, g = r.choice(NAMES), r.choice(GOODS)[0]
        a, b = r.sample(range(3, 40), 2)
        add("not", f"{n} has {a} {g}, not {b}. How many {g} does {n} have?", a)


def _batch2(r: random.Random, add: Add) -> None:
    for _ in range(8):
        n, g = r.choice(NAMES), r.choice(GOODS)[0]
        a, b = r.sample(range(3, 40), 2)
        add("monday", f"{n} had {a} {g} on Monday. On Tuesday {n} sold some and had {b} {g} left. "
            f"How many {g} did {n} have on Monday?", a)  # fmt: skip
        n, g = r.choice(NAMES), r.choice(GOODS)[0]
        a, b = r.sample(range(3, 40), 2)
        add("start", f"{n} started the day with {a} {g} and ended it with {b}. "
            f"How many {g} did {n} start the day with?", a)  # fmt: skip
        g = r.choice(GOODS)[0]
        a, b = r.sample(range(3, 40), 2)
        add("before", f"Before the sale, the shop had {a} {g}. After the sale it had {b} {g}. "
            f"How many {g} did the shop have before the sale?", a)  # fmt: skip
        n, g = r.choice(NAMES), r.choice(GOODS)[0]
        a, b = r.sample(range(3, 40), 2)
        add("lastweek", f"Last week {n}'s shelf held {a} {g}. Now it holds {b} {g}. "
            f"How many {g} did the shelf hold last week?", a)  # fmt: skip


def _batch3(r: random.Random, add: Add) -> None:
    for _ in range(8):
        n, g = r.choice(NAMES), r.choice(GOODS)[0]
        a, b, c = r.sample(range(3, 40), 3)
        add("noon", f"{n} had {a} {g} in the morning, {b} {g} at noon and {c} {g} in the evening. "
            f"How many {g} did {n} have at noon?", b)  # fmt: skip
        n, g = r.choice(NAMES), r.choice(GOODS)[0]
        a, b, c = r.sample(range(3, 40), 3)
        add("tuesday", f"On Monday {n} had {a} {g}. On Tuesday {n} had {b} {g}. On Wednesday {n} had {c} {g}. "
            f"How many {g} did {n} have on Tuesday?", b)  # fmt: skip


def _confirm_noon(r: random.Random, add: Add) -> None:
    """The confirmation of the one kind where no measured team beat `sa` in the probe (``noon``: `sa` 18.8,
    self-consistency 18.8, tool-pair 0.0), fixed before it ran: the same template on 30 fresh tasks, every math
    template of the structure matrix, n = 4."""
    for _ in range(30):
        n, g = r.choice(NAMES), r.choice(GOODS)[0]
        a, b, c = r.sample(range(3, 40), 3)
        add("noon", f"{n} had {a} {g} in the morning, {b} {g} at noon and {c} {g} in the evening. "
            f"How many {g} did {n} have at noon?", b)  # fmt: skip


def _confirm_start(r: random.Random, add: Add) -> None:
    """The second confirmation, fixed after batch 2's teams were measured (``start``: `sa` 21.9, self-consistency
    0.0, tool-pair 3.1) and while the first ran: the same template on 30 fresh tasks, every math template, n = 4."""
    for _ in range(30):
        n, g = r.choice(NAMES), r.choice(GOODS)[0]
        a, b = r.sample(range(3, 40), 2)
        add("start", f"{n} started the day with {a} {g} and ended it with {b}. "
            f"How many {g} did {n} start the day with?", a)  # fmt: skip


MATH_TEMPLATES = ["fixed:single_math", "fixed:reflection", "fixed:ensemble_judge", "fixed:self_consistency",
                  "fixed:debate", "fixed:tool_pair"]  # fmt: skip
#: batch -> (id prefix, seed, generator, [(evaluation folder, methods, n), ...]) as run on 2026-11-29
BATCHES = {
    "b1": ("probe", 7, _batch1, [("sa", ["sa"], 8), ("teams", ["fixed:tool_pair", "fixed:reflection"], 4),
                                 ("sc", ["fixed:self_consistency"], 4)]),
    "b2": ("p2", 11, _batch2, [("sa", ["sa"], 8), ("teams", ["fixed:tool_pair", "fixed:self_consistency"], 4)]),
    "b3": ("p3", 23, _batch3, [("all", ["sa", "fixed:tool_pair", "fixed:self_consistency"], 4)]),
    "c1": ("c1", 101, _confirm_noon, [("all", ["sa", *MATH_TEMPLATES], 4)]),
    "c2": ("c2", 102, _confirm_start, [("all", ["sa", *MATH_TEMPLATES], 4)]),
}  # fmt: skip


def batch_rows(name: str) -> list[Row]:
    prefix, seed, generate, _ = BATCHES[name]
    rows: list[Row] = []

    def add(kind: str, question: str, answer: int) -> None:
        k = sum(row["metadata"]["kind"] == kind for row in rows)
        rows.append({"id": f"{prefix}-{kind}-{k:02d}", "domain": "math", "question": question, "answer": str(answer),
                     "split": "test", "source": "probe", "metadata": {"kind": kind}})  # fmt: skip

    generate(random.Random(seed), add)
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
    for name, (_, _, _, evals) in BATCHES.items():
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
        method = path.name.split(".")[0].replace("fixed_", "fixed:")
        for tree in iter_trees(path):
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
        batch = {prefix: name for name, (prefix, *_) in BATCHES.items()}[group.split("-")[0]]
        kind = group.split("-", 1)[1]
        lines.append(f"| {batch} | {kind} | {len(ids)} | " + " | ".join(cells) + f" | `{best[0]}` | "
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
