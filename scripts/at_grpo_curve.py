"""Per-step team reward of an AT-GRPO run, read from its rollout records (runs/<out>/rollouts/step_*.jsonl).

    python scripts/at_grpo_curve.py runs/at_grpo_planpath_cpu

Columns: step; success rate of the executions (R_correct); mean team reward r_team of the executed
(selected) PlanAgent turns; mean turn reward of all candidates; groups; zero-variance groups.
"""

from __future__ import annotations

import sys
from pathlib import Path

from metaagent.records import read_trees


def main(run: str) -> None:
    files = sorted(Path(run, "rollouts").glob("step_*.jsonl"), key=lambda p: int(p.stem.split("_")[1]))
    print("step  success  team(selected)  reward(all cand.)  groups  zero_var")
    for f in files:
        trees, _ = read_trees(f)
        ex = [e for t in trees for _, e in t.executions()]
        success = [e.reward.correct for e in ex if e.reward is not None and e.reward.correct is not None]
        team, cand, zero = [], [], 0
        groups = [g for e in ex for g in e.groups]
        for g in groups:
            sel = g.candidates[g.selected].reward
            if sel is not None and sel.total is not None:
                team.append(sel.components.get("team", 0.0))
            cand += [r for r in g.rewards if r is not None]
            zero += int(len({r for r in g.rewards if r is not None}) == 1)
        mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
        print(f"{f.stem.split('_')[1]:>4}  {mean(success):7.3f}  {mean(team):14.3f}  {mean(cand):17.3f}  {len(groups):6d}  {zero:8d}")


if __name__ == "__main__":
    main(sys.argv[1])
