#!/usr/bin/env bash
# Train the committed cold-start adapter (metaagent/policy/cold_start_adapter/), which `embedded-sft` loads.
#
# 1. scripts/make_cold_start_data.py writes ~2,300 designer examples (template bank, every bundled train task,
#    balanced over structure classes, task-specific roles/prompts/counts) with the COMPACT designer prompt, and
#    ~76 executor examples (the embedded model's own correct replies, closed with the delivery block).
# 2. metaagent-sft: LoRA rank 16 on all linear layers of the embedded SmolLM2-135M-Instruct. MAX_STEPS optimizer
#    steps of 4 examples (a seeded shuffle of both files), lr 1e-3 with warmup then cosine. Compact prompts are
#    short (~450 tokens an example), so a step takes ~25-30 s on 2 busy CPU cores.
# 3. The adapter is exported in float16 with a machine-independent base name. It records the designer prompt
#    it was trained on (metaagent_prompt.json: compact), so rollout.designer_prompt=auto uses the compact prompt.
#
# The shipped adapter is checkpoint step 50 of this run (MAX_STEPS=100, stopped at step 50 on a shared 2-core
# machine at ~50-90 s a step; loss 2.85 -> ~0.2), exported with
#   python -c "from metaagent.policy.cold_start import export_adapter as e; e('runs/cold_start/checkpoints/step_00000050/models/adapter', 'metaagent/policy/cold_start_adapter')"
# Resumable: if interrupted, run it again (metaagent-sft --resume continues from the newest checkpoint).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
OUT=${OUT:-runs/cold_start}
DATA=${DATA:-runs/cold_start_data}
MAX_STEPS=${MAX_STEPS:-100}
THREADS=${THREADS:-2}
if [ ! -f "$DATA/manifest.json" ]; then
  "$VENV/bin/python" scripts/make_cold_start_data.py --out "$DATA"
fi
RESUME=()
if [ -d "$OUT/checkpoints" ]; then RESUME=(--resume); fi
"$VENV/bin/metaagent-sft" \
  --data "$DATA/designer.jsonl" "$DATA/executor.jsonl" \
  --model embedded --out "$OUT" \
  --lora-rank 16 --epochs 1 --max-steps "$MAX_STEPS" --lr 1e-3 --warmup-steps 5 --batch-size 4 --max-len 768 \
  --save-every 10 --keep-last 2 --threads "$THREADS" --seed 0 "${RESUME[@]}"
"$VENV/bin/python" -c "
from metaagent.policy.cold_start import export_adapter
print('exported', export_adapter('$OUT/adapter', 'metaagent/policy/cold_start_adapter'))
"
