#!/usr/bin/env bash
# Recipe 1: SFT cold start, then RL (hierarchical GRPO) on the embedded model.
#
#   bash examples/01_cold_start_rl.sh                       # embedded SmolLM2-135M: 60 SFT steps, 6 RL steps
#   SFT_STEPS=200 RL_STEPS=60 STAGE_LEN=30 bash examples/01_cold_start_rl.sh   # the paper's K = 30
#
# Size knobs (environment): MODEL (the base: embedded, tiny or a local HF folder), SFT_STEPS, RL_STEPS,
# STAGE_LEN (K: steps per role stage), BATCH (tasks per RL step), OUT. Further arguments go to train-metaagent
# (e.g. rollout.executor.max_tokens=64).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${MODEL:-embedded}
SFT_STEPS=${SFT_STEPS:-60}
RL_STEPS=${RL_STEPS:-6}
STAGE_LEN=${STAGE_LEN:-1}
BATCH=${BATCH:-2}
OUT=${OUT:-runs/examples/cold_start_rl}

# 1. SFT cold start on the repository's sample (designer scripts + executor turns, chat-messages JSONL).
#    A LoRA of rank 8, merged at the end: $OUT/sft/model is a full model folder, a valid --model. One epoch of
#    the sample is 39 steps of 4 examples, so the epochs are not the limit: --max-steps gives SFT_STEPS steps.
metaagent-sft --data "$ROOT/sft_data/designer.jsonl" "$ROOT/sft_data/executor.jsonl" \
              --model "$MODEL" --lora-rank 8 --max-steps "$SFT_STEPS" --epochs "$SFT_STEPS" --batch-size 4 \
              --out "$OUT/sft"

# 2. RL from the cold start: stagewise hierarchical GRPO (executor stage, designer stage, ...), the default
#    config's rollout (M = 2 designs x N = 2 executions per task).
train-metaagent --config default --model "$OUT/sft/model" --steps "$RL_STEPS" --stage-len "$STAGE_LEN" \
                --data.batch-size "$BATCH" --out "$OUT/rl" "$@"

# What was learned: rewards per role and the valid-script rate per step are in $OUT/rl/metrics.jsonl, every
# team in $OUT/rl/rollouts/ (metaagent-replay "$OUT/rl" --stats), the weights in $OUT/rl/checkpoints/.
