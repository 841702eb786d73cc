#!/usr/bin/env bash
# AT-GRPO CPU learning run on 5x5 Plan-Path (embedded SmolLM2-135M, K = 4 PlanAgent branches), then its curve.
#   bash scripts/at_grpo_cpu_run.sh [extra key=value overrides]
set -euo pipefail
out=${OUT:-runs/at_grpo_planpath_cpu}
nice -n 10 train-metaagent --config metaagent/configs/at_grpo_planpath_cpu.yaml trainer.out="$out" "$@"
python scripts/at_grpo_curve.py "$out"
