#!/usr/bin/env bash
# UnityMAS-O's reflective code loop trained on CPU under unity/whiten (critic-free), then the per-step curve:
# per-role turn rewards, rounds used per task, execution reward, pass rate.
#   bash scripts/unity_code_cpu.sh [OUT] [extra overrides...]      e.g. policy.model=tiny trainer.steps=4
# One torch thread: on a shared 2-core machine more threads oversubscribe and a step takes minutes.
set -euo pipefail
OUT=${1:-runs/unity_code}
shift || true
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
nice -n 10 "$PY" -m metaagent.cli.train --config unity_code "trainer.out=$OUT" "$@"
"$PY" - "$OUT" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(f"{sys.argv[1]}/metrics.jsonl")]
keys = ["reward/turn/Planner", "reward/turn/Coder", "reward/turn/Reflector", "rollout/rounds_used",
        "credit/execution_reward_mean", "reward/turn_dropped_executions", "time/step_s"]
print("step  " + "  ".join(k.split("/")[-1][:14].rjust(14) for k in keys))
for r in rows:
    if "rollout/rounds_used" not in r:
        continue
    print(f"{r['step']:>4}  " + "  ".join(f"{r.get(k, 0.0):14.3f}" for k in keys))
PY
