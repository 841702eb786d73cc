"""Per-step rewards of an AT-GRPO run, read from its rollout records (RUN/rollouts/step_*.jsonl).

    python scripts/at_grpo_curve.py RUN [--json OUT.json] [--png OUT.png]

Per step, over the PlanAgent candidate groups (every K candidates of every (task, agent, turn)); the same
numbers over the ToolAgent groups (when that role branches) under ``tool_*`` (its candidates are scored by
what their programs print):

- ``team_all``: mean team reward r_team of all candidates (the progress toward the goal each candidate's
  move list would make, 1 at the goal; an unparsable answer makes none: 0);
- ``team_selected``: mean r_team of the selected (executed) candidates;
- ``reward_all``: mean turn reward r = r_team + r_loc of all candidates (what Eq. 1 normalises);
- ``parsable``: fraction of candidates whose move list parsed (s_fmt);
- ``success``: fraction of executions that reached the goal (R_correct);
- ``groups`` / ``zero_var``: candidate groups and those whose K rewards are all equal (advantage 0).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from metaagent.records import glob_records, read_trees, record_stem

COLUMNS = ("step", "success", "team_selected", "team_all", "reward_all", "parsable", "groups", "zero_var", "tool_reward_all")


def mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def group_stats(groups: list, prefix: str) -> dict:
    cands = [c.reward for g in groups for c in g.candidates if c.reward is not None and c.reward.total is not None]
    selected = [g.candidates[g.selected].reward for g in groups]
    return {
        f"{prefix}team_selected": mean([r.components["team"] for r in selected if r is not None and r.total is not None]),
        f"{prefix}team_all": mean([r.components["team"] for r in cands]),
        f"{prefix}reward_all": mean([r.total for r in cands]),
        f"{prefix}parsable": mean([r.components["s_fmt"] for r in cands]),
        f"{prefix}groups": len(groups),
        f"{prefix}zero_var": sum(len({r for r in g.rewards if r is not None}) == 1 for g in groups),
    }


def step_row(path: Path) -> dict:
    """One step: PlanAgent groups under the plain names, ToolAgent groups (when branched) under ``tool_``."""
    trees, _ = read_trees(path)
    ex = [e for t in trees for _, e in t.executions()]
    groups = [g for e in ex for g in e.groups]
    row = {
        "step": int(record_stem(path).split("_")[1]),
        "success": mean([e.reward.correct for e in ex if e.reward is not None and e.reward.correct is not None]),
    }
    row.update(group_stats([g for g in groups if "tool" not in g.role.lower()], ""))
    tool = [g for g in groups if "tool" in g.role.lower()]
    if tool:
        row.update(group_stats(tool, "tool_"))
    return row


def plot(rows: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from metaagent.eval.html import palette_png

    steps = [r["step"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("team_all", "team reward, all candidates"), ("team_selected", "team reward, selected"),
                       ("reward_all", "turn reward r_team + r_loc, all"), ("parsable", "parsable move lists"),
                       ("success", "episodes solved"), ("tool_reward_all", "ToolAgent turn reward, all")):  # fmt: skip
        if any(key in r for r in rows):
            ax.plot(steps, [r.get(key) for r in rows], marker="o", ms=3, label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel("mean per step")
    ax.set_title("AT-GRPO on 5x5 Plan-Path (tiny model, warm-started format), K = 4")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png.write_bytes(palette_png(fig, dpi=120))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--png", type=Path)
    args = parser.parse_args()
    files = glob_records(Path(args.run, "rollouts"), "step_*.jsonl")  # plain or compressed
    files.sort(key=lambda p: int(record_stem(p).split("_")[1]))
    rows = [step_row(f) for f in files]
    print("  ".join(f"{c:>13}" for c in COLUMNS))
    for r in rows:
        print("  ".join(f"{r.get(c):13.3f}" if isinstance(r.get(c), float) else f"{str(r.get(c, '-')):>13}" for c in COLUMNS))
    from metaagent.eval.metrics import slope_ci

    for key in ("team_all", "team_selected", "success", "parsable"):  # least squares over steps, 95% t interval
        points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), float)]
        if len(points) >= 3:
            slope, low, high = slope_ci(points)
            print(f"slope of {key}: {10 * slope:+.4f} per 10 steps, 95% CI [{10 * low:+.4f}, {10 * high:+.4f}]")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    if args.png:
        plot(rows, args.png)


if __name__ == "__main__":
    main()
