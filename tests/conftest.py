"""Shared test fixtures. Area-specific fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

import os

import pytest

# Tests never reach a model or dataset hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A local ray.init() writes ~/.ray/auth_token when token auth is on, and a later `ray start --address` join on
# the same machine is then refused (InvalidAuthToken): the tests' own Ray runs leave no token behind (the
# two-node cluster test pins its own token per process).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# pytest runs models in the main thread, where spinning OpenMP workers starve the sandbox and code-test
# processes on small machines (measured: tiny-model generation 4.7-12.6 s spinning vs 1.0 s passive).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# `make test` runs the files on two pytest-xdist workers (one per core of the 2-core reference machine): each
# worker and every process it starts computes on one thread, so the two never spin against each other.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")


@pytest.fixture
def math_task():
    from metaagent.data import Task

    return Task(id="t-add", domain="math", question="What is 2 + 3?", answer="5", source="test")


#: test folders whose torch work runs on one thread: on a busy 2-core machine two threads are several times
#: slower (they spin against the other test processes)
ONE_TORCH_THREAD = ("sft", "distill")


@pytest.fixture(autouse=True)
def one_torch_thread(request):
    if request.node.path.parent.name not in ONE_TORCH_THREAD:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
