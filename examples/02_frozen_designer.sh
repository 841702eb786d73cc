#!/usr/bin/env bash
# Recipe 2: a fixed multi-agent system as a frozen designer. Every task gets the same team (the `reflection`
# template: a solver and a critic), and only the agents (the executor role) are trained.
#
#   bash examples/02_frozen_designer.sh                     # embedded-sft, 6 steps
#   TEAM=solver_tester STEPS=30 bash examples/02_frozen_designer.sh
#
# Size knobs (environment): MODEL, TEAM (a template of templates/ or templates/fixed/, or a path
# to a workflow script), STEPS, BATCH, OUT. Further arguments go to
# train-metaagent.
set -euo pipefail
MODEL=${MODEL:-embedded-sft}
TEAM=${TEAM:-reflection}
STEPS=${STEPS:-6}
BATCH=${BATCH:-2}
OUT=${OUT:-runs/examples/frozen_designer}

train-metaagent --config default --model "$MODEL" --frozen-designer "$TEAM" --mode executor_only \
                --steps "$STEPS" --data.batch-size "$BATCH" --out "$OUT" "$@"

# every agent turn of every execution, with its reward and advantage:
metaagent-replay "$OUT" --stats
