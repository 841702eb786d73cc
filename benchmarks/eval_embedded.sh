#!/usr/bin/env bash
# embedded vs embedded-sft (the SFT cold start) on the whole bundled test split (35 math, 7 code tasks) and
# 40 HumanEval problems: sa, fixed single / reflection / ensemble-judge, auto; n = k = 3 samples per task.
# The harness runs the tasks round-robin (task 1 of every benchmark, method and model, then task 2, ...) and
# keeps every finished task: rerun this script to continue a stopped run; the tables are rewritten as it goes.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE
PY=${PY:-.venv/bin/python}  # the checkout's venv (make install); PY=... for another interpreter
nice -n 10 "$PY" -m metaagent.cli.eval \
  --model embedded embedded-sft \
  --methods sa auto fixed:single_math fixed:reflection fixed:ensemble_judge \
  --benchmarks bundled:test/math bundled:test/code humaneval --limit 40 \
  --n 3 --k 1 3 --seed 0 --temperature 0.7 \
  --designer-max-tokens 384 --executor-max-tokens 192 \
  --concurrency 16 --continuous --sandbox-workers 4 --no-html \
  --out benchmarks/results/eval_embedded "$@"
