#!/usr/bin/env bash
# Recipe 6: evaluation-aligned credit. A solver + critic team (frozen); each successful execution's reward is
# split over its agents by Shapley values of exact counterfactual re-runs and over each agent's turns by
# helpfulness labels; each failed execution is bisected to its first error, whose reply becomes the rejected
# side of a DPO pair.
#
#   bash examples/06_eval_aligned_credit.sh                 # embedded-sft, 4 steps, Monte-Carlo prefix judge
#   PREFIX_JUDGE=rule:gold bash examples/06_eval_aligned_credit.sh   # the cheap rule judge (~1/8 the re-runs)
#
# Size knobs (environment): MODEL, STEPS, BATCH, N (executions per task), PREFIX_JUDGE (mc | rule:gold |
# policy), OUT. Further arguments go to train-metaagent (e.g. eval_aligned.max_runs_per_step=64).
set -euo pipefail
MODEL=${MODEL:-embedded-sft}
STEPS=${STEPS:-4}
BATCH=${BATCH:-2}
N=${N:-2}
PREFIX_JUDGE=${PREFIX_JUDGE:-mc}
OUT=${OUT:-runs/examples/eval_aligned_credit}

train-metaagent --config default --model "$MODEL" --frozen-designer reflection --mode executor_only \
                --steps "$STEPS" --data.batch-size "$BATCH" --n-executions "$N" \
                --algo.estimator eval_aligned --optim.dpo --optim.kl-coef 0.001 \
                --eval-aligned.prefix-judge "$PREFIX_JUDGE" --eval-aligned.helpful-judge rule:gold \
                --algo.options '{pg_baseline: batch, exact_max_agents: 5, permutations: 8}' \
                --out "$OUT" "$@"

# the credit of one task, turn by turn: labels, r_i,t, advantages, coalition runs, first error, DPO pairs
TASK=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['task']['id'])" \
       "$(ls "$OUT"/rollouts/step_*.jsonl | head -n 1)")
metaagent-replay "$OUT" --task "$TASK" --step 0
