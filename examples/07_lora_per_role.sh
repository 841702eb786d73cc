#!/usr/bin/env bash
# Recipe 7: LoRA per role. One frozen base model, one LoRA adapter for the designer and one for the executor
# (policy.weights: separate + policy.lora); each stage trains only its role's adapter and each role's rollout
# runs its own. Checkpoints hold the adapters; metaagent-export merges one into a full model folder.
# (AT-GRPO's "L2", an adapter per agent role, is policy.role_models with the same policy.lora keys.)
#
#   bash examples/07_lora_per_role.sh                       # embedded-sft, 4 steps (2 executor + 2 designer)
#   STEPS=60 STAGE_LEN=30 RANK=32 bash examples/07_lora_per_role.sh
#
# Size knobs (environment): MODEL, STEPS, STAGE_LEN, RANK, BATCH, OUT. Further arguments go to
# train-metaagent.
set -euo pipefail
MODEL=${MODEL:-embedded-sft}
STEPS=${STEPS:-4}
STAGE_LEN=${STAGE_LEN:-2}
RANK=${RANK:-16}
BATCH=${BATCH:-2}
OUT=${OUT:-runs/examples/lora_per_role}

train-metaagent --config default --model "$MODEL" --steps "$STEPS" --stage-len "$STAGE_LEN" \
                --data.batch-size "$BATCH" --policy.weights separate \
                --policy.lora "{enabled: true, rank: $RANK, alpha: $((2 * RANK))}" --out "$OUT/train" "$@"

# merge the executor's adapter of the last checkpoint into a full model folder (a valid --model anywhere)
CKPT=$(ls -d "$OUT"/train/checkpoints/step_* | tail -n 1)
metaagent-export "$CKPT" --key executor --out "$OUT/executor_merged"
