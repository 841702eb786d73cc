#!/usr/bin/env bash
# Recipe 3: AT-GRPO on Plan-Path. A fixed tool + planner team (template at_plan_t2, T = 2 turns) on 5x5
# grids; every PlanAgent call samples K = 4 candidates scored at call time on the live environment (turn
# reward at_plan), the best one continues, and each (task, agent, turn) group gets Eq. 1 advantages.
# Then the trained model is evaluated as the paper's single agent and as the two-agent team.
#
#   bash examples/03_at_grpo_planpath.sh                    # embedded, 8 steps (config at_grpo_planpath_cpu)
#   STEPS=40 EVAL_LIMIT=50 bash examples/03_at_grpo_planpath.sh
#
# Size knobs (environment): MODEL, STEPS, K (candidates per PlanAgent call), MAX_TOKENS (per agent reply, in
# training and evaluation), EVAL_LIMIT (test boards), OUT.
# Further arguments go to train-metaagent (the paper's GPU settings: --config at_grpo_planpath).
set -euo pipefail
MODEL=${MODEL:-embedded}
STEPS=${STEPS:-8}
K=${K:-4}
MAX_TOKENS=${MAX_TOKENS:-20}
EVAL_LIMIT=${EVAL_LIMIT:-10}
OUT=${OUT:-runs/examples/at_grpo_planpath}

train-metaagent --config at_grpo_planpath_cpu --model "$MODEL" --steps "$STEPS" \
                rollout.branching.k="$K" rollout.executor.max_tokens="$MAX_TOKENS" --out "$OUT/train" "$@"

# the trained weights (the run's last checkpoint) on held-out test boards (the paper's 10x10 size, harder than
# the 5x5 training grids):
# the single agent (Table 3's first row) and the tool + planner team
CKPT=$(ls -d "$OUT"/train/checkpoints/step_* | tail -n 1)
metaagent-eval --model "$CKPT/models/policy" --methods fixed:single_plan fixed:at_plan_t2 \
               --benchmarks planpath:test --limit "$EVAL_LIMIT" --n 1 --executor-max-tokens "$MAX_TOKENS" \
               --out "$OUT/eval"
