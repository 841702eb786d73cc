#!/usr/bin/env bash
# UnityMAS-O's reflective code loop (workflow D) trained on CPU under unity/whiten (critic-free), then the
# per-step curve: per-role turn rewards, rounds used per task, execution reward (benchmarks/unity_code_curve.py).
#   bash scripts/unity_code_cpu.sh [OUT] [CURVE_DIR] [extra overrides...]
#   e.g. bash scripts/unity_code_cpu.sh runs/unity_code_cpu benchmarks/results/unity_code_cpu trainer.steps=4
# Config unity_code_cpu: 1 task x 4 executions per step (unity_code.yaml is the 2 x 4 one). One torch thread:
# on a shared 2-core machine more threads oversubscribe.
set -euo pipefail
OUT=${1:-runs/unity_code_cpu}
CURVE=${2:-$OUT/curve}
shift 2 || shift $# || true
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
nice -n 10 "$PY" -m metaagent.cli.train --config unity_code_cpu "trainer.out=$OUT" "$@"
"$PY" benchmarks/unity_code_curve.py "$OUT" "$CURVE"
