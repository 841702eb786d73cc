#!/usr/bin/env bash
# Make the repository's small SFT sample in sft_data/ (template-only distillation, no teacher).
#
# Templates from templates/ (with meaning-preserving variation of role names and prompts) are the designer's
# replies; the embedded SmolLM2-135M-Instruct executes each design through the rollout engine's fixed-design
# path on the bundled train tasks of levels 1-2, with the rollout budgets of configs/default.yaml (the demo
# the sample is made for); only designs with a correct execution and the turns of correct executions are
# kept. The executor samples at 0.5 instead of the demo's 1.0 so that the 135M model produces more correct
# runs to keep. Resumable: if interrupted, run it again.
#
# Takes about 1-2 hours on 2 CPU cores. Then the cold-start adapter is trained with scripts/make_cold_start.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
"$VENV/bin/metaagent-distill" \
  --template-only --executor-model embedded --threads 1 \
  --rollout-config default \
  --data bundled:train --levels 1 2 \
  --m-designs 8 --n-executions 1 --tasks-in-flight 4 \
  --no-trees --seed 0 \
  rollout.executor.temperature=0.5 rollout.sandbox_workers=32 rollout.max_inflight=64 \
  --out sft_data "$@"
