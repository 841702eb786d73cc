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
# v1 (commit f1d8f72): checkpoint step 50 of MAX_STEPS=100 with the defaults below (~200 examples seen).
# v2 continues v1 on rebalanced data (no single-agent majority, every reply <= 250 tokens, executor examples twice):
#   cp -r metaagent/policy/cold_start_adapter runs/adapter_v1       # the v1 adapter, before it is replaced
#   DATA=runs/cold_start_data_v2 OUT=runs/cold_start_v2 SCRIPT_TOKENS=250 KEEP=single=0.5 EXECUTOR_COPIES=2 \
#     INIT_ADAPTER=runs/adapter_v1 LR=5e-4 WARMUP=2 MAX_STEPS=60 SAVE_EVERY=5 KEEP_LAST=4 bash scripts/make_cold_start.sh
# v3 (issue #19, try 3) continues v1 on PLAIN-style data (no f-strings, built prompts on their own lines, see
# metaagent/distill/plain_style.py), v1's structure mix, at a lower learning rate:
#   DATA=runs/cold_start_data_v3 OUT=runs/cold_start_v3 PLAIN=1 INIT_ADAPTER=runs/adapter_v1 LR=2e-4 WARMUP=2 \
#     MAX_STEPS=20 SAVE_EVERY=5 KEEP_LAST=4 bash scripts/make_cold_start.sh
# then 12 more steps from its exported step 20 (INIT_ADAPTER=runs/adapter_v3_s20 LR=1e-4 WARMUP=1 MAX_STEPS=12
# SEED=1, fresh OUT). Measured (README, #19): step 10 23/64, step 20 20/64, step 32 39/64 but 87% single-agent,
# so v3 was not exported over the v1 adapter.
# v4 (issue #19, try 4): a FRESH rank-16 LoRA (from the base model, not v1) on SHORT scripts (--short: a short
# template bank, one-sentence prompts naming the task's topic and subject, 2-3 agents, 1-2 rounds, plain style;
# multi-agent replies ~95-140 tokens), trained longer than v1:
#   DATA=runs/cold_start_data_v4 OUT=runs/cold_start_v4 SHORT=1 MAX_STEPS=150 SAVE_EVERY=25 KEEP_LAST=6 \
#     EXPORT=runs/adapter_v4_final bash scripts/make_cold_start.sh
# The shipped adapter (README, "Designer cold start v4") is this run's final step 150; without EXPORT=... the
# command exports it over metaagent/policy/cold_start_adapter/ itself.
# and the README's designer section says which checkpoint was exported and what it measures.
# v6, the suite cold start (issue #42, alias embedded-sft-suite, metaagent/policy/suite_cold_start_adapter/): v5's data
# plus the structure-sensitive suite's train split (--suite 4: balanced designer examples per family, coder examples
# with the reference programs, tool-reader examples), a fresh rank-16 LoRA, 200 steps:
#   python scripts/make_cold_start_data.py --out runs/cold_start_data_v6 --short --code-references 4 --suite 4 \
#     --suite-families arith code lookup strings   # (as made: the start family came later)
#   DATA=runs/cold_start_data_v6 OUT=runs/cold_start_v6 SHORT=1 MAX_STEPS=200 SAVE_EVERY=50 KEEP_LAST=4 \
#     EXPORT=runs/adapter_v6_final bash scripts/make_cold_start.sh
# Resumable: if interrupted, run it again (metaagent-sft --resume continues from the newest checkpoint).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
OUT=${OUT:-runs/cold_start}
DATA=${DATA:-runs/cold_start_data}
MAX_STEPS=${MAX_STEPS:-100}
THREADS=${THREADS:-2}
LR=${LR:-1e-3}
WARMUP=${WARMUP:-5}
SCRIPT_TOKENS=${SCRIPT_TOKENS:-300}   # v2: 250 (every reply well under the benchmark's 320-token budget)
KEEP=${KEEP:-}                        # v2: "single=0.5" (fewer single-agent designs, see the README)
EXECUTOR_COPIES=${EXECUTOR_COPIES:-1} # v2: 2 (keeps the executor share when the designer data grows)
INIT_ADAPTER=${INIT_ADAPTER:-}        # v2: runs/adapter_v1 (continue the v1 adapter)
PLAIN=${PLAIN:-}                      # v3: 1 (plain-style replies: no f-strings)
SHORT=${SHORT:-}                      # v4: 1 (short template bank, one-sentence prompts; see --short)
EXPORT=${EXPORT:-metaagent/policy/cold_start_adapter}  # where the final adapter is exported (v4: runs/adapter_v4_final)
SAVE_EVERY=${SAVE_EVERY:-10}          # v2: 5
KEEP_LAST=${KEEP_LAST:-2}             # v2: 4
SEED=${SEED:-0}
if [ ! -f "$DATA/manifest.json" ]; then
  # shellcheck disable=SC2086
  PLAIN_FLAG=()
  if [ -n "$PLAIN" ]; then PLAIN_FLAG=(--plain); fi
  if [ -n "$SHORT" ]; then PLAIN_FLAG+=(--short); fi
  "$VENV/bin/python" scripts/make_cold_start_data.py --out "$DATA" --max-script-tokens "$SCRIPT_TOKENS" \
    "${PLAIN_FLAG[@]}" --keep $KEEP
fi
RESUME=()
if [ -d "$OUT/checkpoints" ]; then RESUME=(--resume); fi
INIT=()
if [ -n "$INIT_ADAPTER" ]; then INIT=(--init-adapter "$INIT_ADAPTER"); fi
EXECUTOR=()
for _ in $(seq "$EXECUTOR_COPIES"); do EXECUTOR+=("$DATA/executor.jsonl"); done
"$VENV/bin/metaagent-sft" \
  --data "$DATA/designer.jsonl" "${EXECUTOR[@]}" \
  --model embedded --out "$OUT" "${INIT[@]}" \
  --lora-rank 16 --epochs 1 --max-steps "$MAX_STEPS" --lr "$LR" --warmup-steps "$WARMUP" --batch-size 4 --max-len 768 \
  --save-every "$SAVE_EVERY" --keep-last "$KEEP_LAST" --threads "$THREADS" --seed "$SEED" "${RESUME[@]}"
"$VENV/bin/python" -c "
from metaagent.policy.cold_start import export_adapter
print('exported', export_adapter('$OUT/adapter', '$EXPORT'))
"
