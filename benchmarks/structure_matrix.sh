#!/usr/bin/env bash
# The structure matrix (issue #42): the suite's test tasks, families x (sa, the templates that apply, auto), n = 4.
# Two metaagent-eval runs side by side (their agent calls compete for the same cores, so both advance): the math
# families (arith, strings, lookup, start) with the math templates, the code family with the code templates; each
# runs its tasks round-robin over benchmarks and methods and keeps every finished task, so rerunning this script
# continues a stopped run (a family added later is run alone: the finished ones are kept). Then
# benchmarks/structure_matrix.py writes table.md and matrix.json from all records.
#   MODEL=...   the model of both roles (default: the suite cold start, embedded-sft-suite)
#   DTYPE=bfloat16  the hf backend's weights (bf16 decode 2.1x fp32 at 8 rows on an AMX host, step_speed.txt; training's
#               rollouts are bf16 by default; float32 on CPUs without bf16 units). Part of a run's identity: resume with the same
#   LIMIT=30    test tasks per family;  REPORT_ONLY=1: only rewrite the report from the records
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-embedded-sft-suite}
OUT=${OUT:-benchmarks/results/structure_matrix}
LIMIT=${LIMIT:-30}
DTYPE=${DTYPE:-bfloat16}
COMMON=(--model "$MODEL" --dtype "$DTYPE" --n 4 --k 1 4 --seed 0 --temperature 0.7 --designer-max-tokens 384
        --executor-max-tokens 192 --concurrency 16 --continuous --sandbox-workers 2 --limit "$LIMIT" --no-html)
if [ -z "${REPORT_ONLY:-}" ]; then
  nice -n 10 "$PY" -m metaagent.cli.eval "${COMMON[@]}" --out "$OUT/evals/math" \
    --methods sa auto fixed:single_math fixed:reflection fixed:ensemble_judge fixed:self_consistency fixed:debate \
              fixed:tool_pair \
    --benchmarks suite_arith:test suite_strings:test suite_lookup:test suite_start:test "$@" &
  MATH=$!
  nice -n 10 "$PY" -m metaagent.cli.eval "${COMMON[@]}" --out "$OUT/evals/code" \
    --methods sa auto fixed:single_code fixed:reflection_code fixed:ensemble_code fixed:solver_tester fixed:sample_tests \
    --benchmarks suite_code:test "$@" &
  CODE=$!
  trap 'kill $MATH $CODE 2>/dev/null' INT TERM
  wait $MATH $CODE
fi
"$PY" benchmarks/structure_matrix.py --out "$OUT"
