#!/usr/bin/env bash
# embedded vs embedded-sft (the SFT cold start): sa, fixed single / reflection / ensemble-judge, auto; k = 3.
# Grows the task count in rounds; every round resumes the one results directory (finished tasks are kept),
# so the tables are balanced across methods and models at every moment. The last round (--limit 40) is the
# full size asked for: the whole bundled test split (35 math, 7 code tasks) and 40 HumanEval problems. Usage: bash benchmarks/eval_embedded.sh [LIMITS...]
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE
PY=${PY:-/work/main/.venv/bin/python}
OUT=benchmarks/results/eval_embedded
COMMON=(--model embedded embedded-sft
        --methods sa auto fixed:single_math fixed:reflection fixed:ensemble_judge
        --n 3 --k 1 3 --seed 0 --temperature 0.7
        --designer-max-tokens 384 --executor-max-tokens 192
        --concurrency 4 --sandbox-workers 4 --out "$OUT")
for limit in ${@:-2 5 10 40}; do
  nice -n 10 "$PY" -m metaagent.cli.eval "${COMMON[@]}" \
    --benchmarks bundled:test/math bundled:test/code humaneval --limit "$limit"
done
