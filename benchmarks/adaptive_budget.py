"""Adaptive M x N budget vs fixed M x N, side by side: informative groups per 1,000 generated tokens.

For each of ``--steps`` batches of the config's task sampler (the training run's batches, seeds as
``train_step`` derives them), the designer stage runs ONCE, then its designs are executed twice from copies:

- fixed:    N executions of every valid design (``rollout.adaptive_budget.enabled=false``);
- adaptive: ``first_n`` executions of every valid design, then the batch's remaining N x (valid designs)
            budget round-robin over the designs whose rewards disagree (``metaagent.rollout.adaptive``).

Same tasks, same designs, same execution seeds (execution j of a design has the same seed in both arms, so
the adaptive arm's first wave samples as the fixed arm's first ``first_n`` executions do, up to the numerics of
a different batch composition). Nothing is trained. Printed per
arm: informative groups (>= 2 members, unequal rewards; designer groups and executor groups counted
separately, with the grouping of ``algo.executor_group`` / ``algo.executor_unit``), executions, generated
tokens (designer tokens are the same in both arms and counted in both), informative groups per 1,000
generated tokens (all tokens, and executor tokens only), and the ratio adaptive / fixed. Beside the groups, the
designs and executions whose advantage is not 0 (``executor_balance`` member for fixed, design for adaptive):
moving executions to a design whose rewards already disagree adds no informative group (its groups are
informative already) but adds samples that carry an advantage; the group count credits the adaptive arm only
for the executions that agreeing designs no longer spend.

The default config runs N = 2 executions per design, which leaves nothing to free with first_n = 2, so the
comparison raises N (``--n``, default 4, the paper's N) on top of ``--config``.

    nice -n 10 .venv/bin/python benchmarks/adaptive_budget.py --config default --steps 3 [--model tiny]
        [--n 4] [--first-n 2] [--max-n 8] [--set rollout.m_designs=2 ...] [--json out.json] [--trees DIR]
    .venv/bin/python benchmarks/adaptive_budget.py --report out.json     # the table of a saved (or cut) run
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time

import metaagent  # noqa: F401  (before torch: passive OpenMP waiting, see metaagent/__init__.py)

ARMS = ("fixed", "adaptive")


def tokens(trees) -> tuple[int, int]:
    """(designer, executor) generated tokens of ``trees``."""
    designer = sum(len(d.sample.response_ids) for t in trees for d in t.designs if d.sample is not None)
    executor = sum(len(turn.response_ids) for t in trees for _, e in t.executions() for turn in e.turns)
    return designer, executor


def arm_row(trees, cfg, wall_s: float, balance: str) -> dict[str, float]:
    from metaagent.credit import call_matrix, hierarchical_credit, reward_matrix
    from metaagent.records import DESIGNER, EXECUTOR
    from metaagent.train.dynamic_sampling import informative_groups

    groups = {DESIGNER: 0, EXECUTOR: 0}
    samples = {DESIGNER: 0, EXECUTOR: 0}  # designs / executions whose advantage is not 0: what the update learns from
    for t in trees:
        for role, k in informative_groups(t, executor_group=cfg.algo.executor_group, executor_unit=cfg.algo.executor_unit).items():
            groups[role] += k
        calls = call_matrix(t) if cfg.algo.executor_unit == "call" else None
        c = hierarchical_credit(
            reward_matrix(t), executor_group=cfg.algo.executor_group, calls=calls, executor_balance=balance
        )
        samples[DESIGNER] += sum(a not in (None, 0.0) for a in c.designer)
        samples[EXECUTOR] += sum(a not in (None, 0.0) for row in c.executor if row for a in row)
    d_tok, e_tok = tokens(trees)
    return {
        "designer_groups": groups[DESIGNER],
        "executor_groups": groups[EXECUTOR],
        "designs_with_advantage": samples[DESIGNER],
        "executions_with_advantage": samples[EXECUTOR],
        "executions": sum(len(d.executions) for t in trees for d in t.designs),
        "designer_tokens": d_tok,
        "executor_tokens": e_tok,
        "execute_s": wall_s,
    }


def per_k(row: dict[str, float]) -> dict[str, float]:
    informative = row["designer_groups"] + row["executor_groups"]
    total = row["designer_tokens"] + row["executor_tokens"]
    extra = {}
    if "executions_with_advantage" in row:
        extra["executions_with_advantage_per_1k_tokens"] = 1000 * row["executions_with_advantage"] / total if total else 0.0
    return {
        **extra,
        "informative_groups": informative,
        "per_1k_tokens": 1000 * informative / total if total else 0.0,
        "per_1k_executor_tokens": 1000 * informative / row["executor_tokens"] if row["executor_tokens"] else 0.0,
        "designer_per_1k_tokens": 1000 * row["designer_groups"] / total if total else 0.0,
        "executor_per_1k_tokens": 1000 * row["executor_groups"] / total if total else 0.0,
    }


def report(rows: list[dict]) -> dict:
    """Print the side-by-side table of ``rows`` (one per step) and return the totals."""
    keys = ("designer_groups", "executor_groups", "executions", "designer_tokens", "executor_tokens", "execute_s",
            "designs_with_advantage", "executions_with_advantage")  # fmt: skip
    keys = tuple(k for k in keys if all(k in row[arm] for row in rows for arm in ARMS))  # older files lack the last two
    totals = {arm: {k: sum(row[arm][k] for row in rows) for k in keys} for arm in ARMS}
    for arm in ARMS:
        totals[arm].update(per_k(totals[arm]))
    for k in ("budget", "executions", "moved", "designs_stopped", "questions_stopped"):
        totals["adaptive"][f"rollout/adaptive/{k}"] = sum(row["adaptive"][f"rollout/adaptive/{k}"] for row in rows)
    b = totals["adaptive"]["rollout/adaptive/budget"]
    totals["adaptive"]["rollout/adaptive/budget_used"] = totals["adaptive"]["rollout/adaptive/executions"] / b if b else 0.0

    print(f"\n{'':34}{'fixed':>12}{'adaptive':>12}{'ratio':>9}")
    lines = [
        ("informative designer groups", "designer_groups"),
        ("informative executor groups", "executor_groups"),
        ("informative groups", "informative_groups"),
        ("executions", "executions"),
        ("generated tokens, designer", "designer_tokens"),
        ("generated tokens, executor", "executor_tokens"),
        ("executor stage wall s", "execute_s"),
        ("designer groups / 1k tokens", "designer_per_1k_tokens"),
        ("executor groups / 1k tokens", "executor_per_1k_tokens"),
        ("informative groups / 1k tokens", "per_1k_tokens"),
        ("... / 1k executor tokens", "per_1k_executor_tokens"),
        ("designs with advantage != 0", "designs_with_advantage"),
        ("executions with advantage != 0", "executions_with_advantage"),
        ("... executions / 1k tokens", "executions_with_advantage_per_1k_tokens"),
    ]
    for label, k in lines:
        if k not in totals["fixed"]:
            continue
        fv, av = totals["fixed"][k], totals["adaptive"][k]
        ratio = f"{av / fv:9.2f}" if fv else f"{'-':>9}"
        fmt = "{:12.3f}" if "per_1k" in k else "{:12.0f}"
        print(f"{label:34}{fmt.format(fv)}{fmt.format(av)}{ratio}")
    a = totals["adaptive"]
    print(
        f"adaptive budget: {a['rollout/adaptive/executions']:.0f} of {b:.0f} executions used "
        f"({a['rollout/adaptive/budget_used']:.0%}), {a['rollout/adaptive/moved']:.0f} moved, "
        f"{a['rollout/adaptive/designs_stopped']:.0f} designs and {a['rollout/adaptive/questions_stopped']:.0f} "
        f"questions stopped early"
    )
    return totals


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="default")
    p.add_argument("--model", help="policy.model (e.g. tiny for a quick check; default: the config's)")
    p.add_argument("--steps", type=int, default=3, help="batches (data.batch_size tasks each)")
    p.add_argument("--n", type=int, default=4, help="rollout.n_executions of the fixed arm (the budget per design)")
    p.add_argument("--first-n", type=int, default=2)
    p.add_argument("--max-n", type=int, default=None)
    p.add_argument("--set", nargs="*", default=[], help="config overrides, e.g. data.batch_size=4")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    p.add_argument("--json", help="write the per-step rows and totals here")
    p.add_argument("--trees", metavar="DIR", help="also write each arm's rollout trees here (JSONL per step)")
    p.add_argument("--report", metavar="JSON", help="only print the table of a --json file (e.g. of a run cut short)")
    args = p.parse_args()
    if args.report:
        with open(args.report) as fh:
            rows = json.load(fh)["rows"]
        print(f"{len(rows)} steps from {args.report}")
        report(rows)
        return

    import torch

    from metaagent.records import write_trees
    from metaagent.rollout.adaptive import adaptive_metrics
    from metaagent.seeding import derive_seed
    from metaagent.train.config import TrainConfig
    from metaagent.train.loop import TrainLoop

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.trees:
        os.makedirs(args.trees, exist_ok=True)
    out = tempfile.mkdtemp(prefix="adaptive_bench_")
    overrides = [
        *([f"policy.model={args.model}"] if args.model else []),
        *args.set,
        f"rollout.n_executions={args.n}",
        "rollout.adaptive_budget.enabled=false",
        f"rollout.adaptive_budget.first_n={args.first_n}",
        *([f"rollout.adaptive_budget.max_n={args.max_n}"] if args.max_n else []),
        f"trainer.out={out}", "trainer.save_every=0", "trainer.val_every=0", "trainer.loggers=[jsonl]",
    ]  # fmt: skip
    cfg = TrainConfig.load(args.config, overrides)
    r = cfg.rollout
    print(
        f"{args.config}: model {cfg.policy.model}, B={cfg.data.batch_size} M={r.m_designs} N={r.n_executions}, "
        f"adaptive first_n={r.adaptive_budget.first_n} max_n={r.adaptive_budget.cap(r.n_executions)}, "
        f"executor_group={cfg.algo.executor_group}, executor_unit={cfg.algo.executor_unit}; "
        f"torch threads {torch.get_num_threads()}, load avg {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    rows: list[dict] = []
    with TrainLoop(cfg) as trainer:
        engine = trainer.engine
        for step in range(args.steps):
            tasks = trainer.sampler.next_batch()
            seed = derive_seed(cfg.trainer.seed, step, "rollout")
            t0 = time.perf_counter()
            designed = engine.rollout(tasks, step=step, seed=seed, execute=False)
            design_s = time.perf_counter() - t0
            row: dict = {"step": step, "design_s": design_s, "valid_designs": sum(d.valid for t in designed for d in t.designs)}
            order = ARMS if step % 2 == 0 else ARMS[::-1]  # alternate which arm runs first (warm caches)
            for arm in order:
                trees = copy.deepcopy(designed)
                engine.config.adaptive_budget.enabled = arm == "adaptive"
                t0 = time.perf_counter()
                engine.execute(trees, step=step, seed=seed, mode="train")
                wall = time.perf_counter() - t0
                row[arm] = arm_row(trees, cfg, wall, "design" if arm == "adaptive" else "member")
                if args.trees:
                    write_trees(os.path.join(args.trees, f"{arm}_step{step}.jsonl"), trees)
                if arm == "adaptive":
                    row[arm].update(adaptive_metrics(trees, r.n_executions, r.adaptive_budget.first_n))
            engine.config.adaptive_budget.enabled = False
            rows.append(row)
            f, a = row["fixed"], row["adaptive"]
            print(
                f"step {step}: {row['valid_designs']} valid designs, design {design_s:.0f}s | fixed: "
                f"{f['designer_groups']}+{f['executor_groups']} groups, {f['executions']} exec, "
                f"{f['designer_tokens']}+{f['executor_tokens']} tok, {f['execute_s']:.0f}s | adaptive: "
                f"{a['designer_groups']}+{a['executor_groups']} groups, {a['executions']} exec, "
                f"{a['designer_tokens']}+{a['executor_tokens']} tok, {a['execute_s']:.0f}s, moved {a['rollout/adaptive/moved']:.0f}, "
                f"designs stopped {a['rollout/adaptive/designs_stopped']:.0f}, questions stopped "
                f"{a['rollout/adaptive/questions_stopped']:.0f}",
                flush=True,
            )
            if args.json:  # after every step, so a run cut short keeps its rows
                with open(args.json, "w") as fh:
                    json.dump({"argv": sys.argv[1:], "rows": rows}, fh, indent=2)
    totals = report(rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"argv": sys.argv[1:], "rows": rows, "totals": totals}, fh, indent=2)


if __name__ == "__main__":
    main()
