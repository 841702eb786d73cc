#!/usr/bin/env bash
# Recipe 4: MAPPA with a rule coach. The MathChat team (Problem Solver -> Code Executor -> Verifier, a frozen
# design); after every execution a coach scores each agent action 0-10, and REINFORCE++ trains every action on
# its own score (KL in the reward, batch normalisation). The rule coach (coach.backend: rule) is deterministic
# and needs no API key; the paper's coach is an LLM judge (--config mappa_mathchat, coach.backend: openai).
#
#   bash examples/04_mappa_rule_coach.sh                    # embedded-sft, 8 steps
#   STEPS=32 BATCH=4 bash examples/04_mappa_rule_coach.sh
#
# Size knobs (environment): MODEL, STEPS, BATCH (tasks per step), N (executions per task), OUT.
# Further arguments go to train-metaagent.
set -euo pipefail
MODEL=${MODEL:-embedded-sft}
STEPS=${STEPS:-8}
BATCH=${BATCH:-2}
N=${N:-2}
OUT=${OUT:-runs/examples/mappa_rule_coach}

train-metaagent --config mappa_tiny --model "$MODEL" --steps "$STEPS" --data.batch-size "$BATCH" \
                --n-executions "$N" --coach.backend rule --coach.model mappa_format --out "$OUT" "$@"

# the coach's mean score per step (0-10; also per agent: judge/score_mean/<role>) is in $OUT/metrics.jsonl
