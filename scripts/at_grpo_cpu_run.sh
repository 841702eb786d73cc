#!/usr/bin/env bash
# AT-GRPO CPU learning run on 5x5 Plan-Path with the tiny model, then its curve (json + png).
#   bash scripts/at_grpo_cpu_run.sh [extra key=value overrides]          (OUT=..., STEPS=... to change)
#
# 1. Warm start (scripts/at_grpo_warm_start.py): 200 SFT steps teach the random tiny model the answer format
#    of both agents of at_plan_t2 (PlanAgent: "##### [M]" with a random move, or an unparsable reply, one in
#    two; ToolAgent: a program printing a random move). Nothing in it depends on the board.
# 2. AT-GRPO (configs/at_grpo_planpath_cpu.yaml): tool + planner, T = 2 turns, K = 4 candidates for every
#    agent call (roles '*', as in the paper), turn reward at_plan (r = r_team + r_loc, alpha = 1), Eq. 1 per
#    (task, agent, turn) group, 8 boards per step, lr 1e-3 (the tiny model), no validation.
# 3. scripts/at_grpo_curve.py: per-step team reward (all candidates / selected), turn reward, parsable rate,
#    success; written to OUT/curve.json and OUT/curve.png.
set -euo pipefail
out=${OUT:-runs/at_grpo_planpath_cpu}
steps=${STEPS:-40}
model=$(nice -n 10 python scripts/at_grpo_warm_start.py "$out" --steps 200 | tail -n 1)
nice -n 10 train-metaagent --config configs/at_grpo_planpath_cpu.yaml \
  policy.model="$model" data.batch_size=8 'data.val=[]' rollout.executor.max_tokens=32 \
  "rollout.branching.roles=[\"*\"]" optim.lr=1e-3 trainer.steps="$steps" trainer.out="$out/run" "$@"
python scripts/at_grpo_curve.py "$out/run" --json "$out/curve.json" --png "$out/curve.png"
