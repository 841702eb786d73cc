"""Fixtures of the replay tests: real run directories produced once per session by the rollout engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_helpers import make_fixed_run, make_scripted_pair, make_tiny_run


@pytest.fixture(scope="session")
def sandbox_pool():
    from metaagent.workflow import SandboxPool

    with SandboxPool(workers=2) as pool:
        yield pool


@pytest.fixture(scope="session")
def tiny_policy():
    """The tiny random model. One torch thread: on 2 shared cores, 2 threads spin against the other test
    processes and decoding gets ~30x slower."""
    import torch

    from metaagent.policy.factory import build_policy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield build_policy("hf", "tiny")
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory, tiny_policy, sandbox_pool) -> dict[str, Path]:
    """Run A: 4 training steps (tiny designer + fixed designs) with metrics and a validation file;
    run B: single-agent fixed rollouts of the same tasks."""
    root = tmp_path_factory.mktemp("tiny_runs")
    return {
        "a": make_tiny_run(root / "tiny_a", tiny_policy, sandbox_pool),
        "b": make_fixed_run(root / "tiny_b", tiny_policy, sandbox_pool),
    }


@pytest.fixture(scope="session")
def scripted_runs(tmp_path_factory, sandbox_pool) -> tuple[Path, Path, dict[str, str]]:
    """Runs A and B of three math tasks with known outcomes (see replay_helpers.make_scripted_pair)."""
    return make_scripted_pair(tmp_path_factory.mktemp("scripted_runs"), sandbox_pool)
