#!/usr/bin/env bash
# Recipe 8: evaluation in the paper's Table 1 layout. Each model answers alone (sa), as a fixed team
# (fixed:<template>) and as the team its designer writes per task (auto); avg@k / pass@k / maj@k with 95%
# bootstrap CIs per benchmark. $OUT holds table.md (the table), results.json, report.html and the records;
# rerunning the same command resumes it.
#
#   bash examples/08_eval_table1.sh                         # embedded vs embedded-sft, 10 tasks x 3 samples
#   LIMIT=40 N=3 BENCHMARKS="bundled:test humaneval" bash examples/08_eval_table1.sh
#
# Size knobs (environment): MODELS (space-separated), METHODS, BENCHMARKS, LIMIT (tasks per benchmark),
# N (samples per task), OUT. Further arguments go to metaagent-eval (e.g. --executor-max-tokens 128).
set -euo pipefail
MODELS=${MODELS:-"embedded embedded-sft"}
METHODS=${METHODS:-"sa fixed:single_math fixed:reflection auto"}
BENCHMARKS=${BENCHMARKS:-"bundled:test"}
LIMIT=${LIMIT:-10}
N=${N:-3}
OUT=${OUT:-runs/examples/eval_table1}

# shellcheck disable=SC2086  # the lists are meant to split into words
metaagent-eval --models $MODELS --methods $METHODS --benchmarks $BENCHMARKS \
               --limit "$LIMIT" --n "$N" --out "$OUT" "$@"

cat "$OUT/table.md"
