"""The per-step curve of a UnityMAS-O code-loop run (workflow D): per-role turn rewards, rounds used per task
(the paper's "used turns fall" curve), the execution reward (final pass rate) and the step time.

    python benchmarks/unity_code_curve.py RUN_DIR OUT_DIR

Reads RUN_DIR/metrics.jsonl (a run of ``bash scripts/unity_code_cpu.sh``) and writes OUT_DIR/curve.json (one row
per step, the keys below) and OUT_DIR/curve.png (two panels: rewards, rounds used), then prints the table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROLES = ("Planner", "Coder", "Reflector")
#: column -> metrics.jsonl key
KEYS = {
    **{role: f"reward/turn/{role}" for role in ROLES},
    "rounds_used": "rollout/rounds_used",
    "execution_reward": "credit/execution_reward_mean",
    "turn_rewards": "reward/turn_rewards",
    "dropped_executions": "reward/turn_dropped_executions",
    "step_s": "time/step_s",
}


def curve(run: Path) -> list[dict]:
    rows = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "rollout/rounds_used" in r:  # a training step (validation rows have no rounds)
            rows.append({"step": r["step"], **{name: r.get(key) for name, key in KEYS.items()}})
    return rows


def plot(rows: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    from metaagent.eval.html import palette_png

    fig = Figure(figsize=(9, 3.4), dpi=110)
    left, right = fig.subplots(1, 2)
    steps = [r["step"] for r in rows]
    for name in (*ROLES, "execution_reward"):
        left.plot(steps, [r[name] for r in rows], marker="o", ms=3, label=name.replace("_", " "))
    left.set_xlabel("training step")
    left.set_ylabel("mean reward")
    left.set_title("turn reward per role (code_delta + format)", fontsize=9)
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    right.plot(steps, [r["rounds_used"] for r in rows], marker="o", ms=3, color="#6b7280")
    right.set_xlabel("training step")
    right.set_ylabel("rounds used per execution")
    right.set_ylim(0.8, 3.2)
    right.set_title("rounds used (of T = 3)", fontsize=9)
    right.grid(alpha=0.3)
    fig.tight_layout()
    path.write_bytes(palette_png(fig))


def main(run: str, out: str) -> None:
    rows = curve(Path(run))
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "curve.json").write_text(json.dumps(rows, indent=1))
    if rows:
        plot(rows, out_dir / "curve.png")
    cols = ["step", *KEYS]
    print("  ".join(c[:12].rjust(12) for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:12.3f}" if isinstance(r[c], float) else str(r[c]).rjust(12) for c in cols))


if __name__ == "__main__":
    main(*sys.argv[1:3])
