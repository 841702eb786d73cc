#!/usr/bin/env bash
# Train the committed cold-start adapter (metaagent/policy/cold_start_adapter/) on the sample in sft_data/.
#
# LoRA (rank 8, all linear layers) on the embedded SmolLM2-135M-Instruct, on the designer and executor
# examples that scripts/make_sft_sample.sh distilled; then the adapter is exported in float16 with a
# machine-independent base name. metaagent.train.sft_cold_start.load_cold_start() merges it into the
# embedded model once and caches the result, so the demo can start RL from it.
#
# Takes about an hour on 2 busy CPU cores (one torch thread is faster there than two). Resumable: if
# interrupted, run it again (metaagent-sft --resume continues from the newest checkpoint).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
OUT=${OUT:-runs/cold_start}
RESUME=()
if [ -d "$OUT/checkpoints" ]; then RESUME=(--resume); fi
"$VENV/bin/metaagent-sft" \
  --data sft_data/designer.jsonl sft_data/executor.jsonl \
  --model embedded --out "$OUT" \
  --lora-rank 8 --epochs 2 --lr 5e-4 --warmup-steps 2 --batch-size 8 --max-len 1280 \
  --save-every 10 --threads 1 --seed 0 "${RESUME[@]}"
"$VENV/bin/python" -c "
from metaagent.train.sft_cold_start import export_adapter
print('exported', export_adapter('$OUT/adapter', 'metaagent/policy/cold_start_adapter'))
"
