#!/usr/bin/env bash
# The GPU check (scripts/gpu_check.py --help): every GPU-side piece in stages with their own time budgets (7 min
# on one GPU in all), a PASS / FAIL / SKIPPED line each, and OUT/summary.json + OUT/summary.md.
#
#   bash scripts/gpu_check.sh                                  # this machine's GPU, the embedded models
#   bash scripts/gpu_check.sh --model DIR --wheels DIR         # a machine without network (see --prepare)
#   bash scripts/gpu_check.sh --device cpu --tiny              # the dry mode: every stage's logic on CPU
#   bash scripts/gpu_check.sh --prepare DIR                    # here: DIR/model (no weights) + DIR/wheels
#
# The interpreter: $PYTHON, else the checkout's .venv (make install), else python3 (a GPU image's own torch);
# it imports metaagent from this checkout (first on PYTHONPATH), installed or not.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3
fi
exec "$PY" scripts/gpu_check.py "$@"
