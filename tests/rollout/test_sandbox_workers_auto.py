"""``sandbox_workers: auto`` (issue 63): as many sandbox workers as the decode batch holds rows, so a step's
agent calls can fill ``policy.max_batch_size``; resolved when a TrainConfig or EvalConfig loads, explicit
values kept."""

from __future__ import annotations

import pytest

from metaagent.config import ConfigError, from_dict, load_config
from metaagent.eval import make_config
from metaagent.eval.config import auto_concurrency
from metaagent.rollout.config import DEFAULT_DECODE_ROWS, RolloutConfig, auto_sandbox_workers
from metaagent.rollout.engine import make_pool
from metaagent.train.config import TrainConfig


def test_auto_is_the_decode_batch_and_explicit_values_stay():
    assert [auto_sandbox_workers(b) for b in (1, 8, 32, 128)] == [1, 8, 32, 128]
    assert RolloutConfig().sandbox_workers == "auto"
    assert RolloutConfig().workers() == DEFAULT_DECODE_ROWS and RolloutConfig().workers(12) == 12
    assert RolloutConfig(sandbox_workers=3).workers(64) == 3  # a number is never resized
    assert from_dict(RolloutConfig, {"sandbox_workers": "16"}).sandbox_workers == 16  # command-line text
    with pytest.raises(ConfigError, match="sandbox_workers"):
        from_dict(RolloutConfig, {"sandbox_workers": 0})
    with pytest.raises(ConfigError, match="sandbox_workers"):
        from_dict(RolloutConfig, {"sandbox_workers": "many"})


def test_train_config_resolves_auto_from_the_policy_batch():
    assert TrainConfig(policy={"max_batch_size": 12}).rollout.sandbox_workers == 12
    mine = TrainConfig(policy={"max_batch_size": 12}, rollout={"sandbox_workers": 5})
    assert mine.rollout.sandbox_workers == 5
    default = load_config(TrainConfig, "default")  # the packaged default run: 32 rows, 32 workers (was 8)
    assert default.rollout.sandbox_workers == default.policy.max_batch_size == 32
    small = load_config(TrainConfig, "default", ["policy.max_batch_size=6"])
    assert small.rollout.sandbox_workers == 6


def test_a_pool_made_from_an_unresolved_config_gets_numbered_workers():
    pool = make_pool(RolloutConfig())  # workers start lazily: nothing runs until an execution needs one
    try:
        assert pool.workers == DEFAULT_DECODE_ROWS
    finally:
        pool.close()


def test_eval_auto_concurrency_keeps_the_batch_full():
    assert auto_concurrency(32, 4) == 16 and auto_concurrency(32, 3) == 22 and auto_concurrency(8, 1) == 16
    config = make_config(n=4, max_batch_size=32)
    assert (config.concurrency, config.sandbox_workers, config.continuous) == (16, 32, True)
    assert config.concurrency * config.n >= 2 * config.sandbox_workers  # every worker has an execution queued
    mine = make_config(n=4, concurrency=3, sandbox_workers=2, continuous=False)
    assert (mine.concurrency, mine.sandbox_workers, mine.continuous) == (3, 2, False)
    assert make_config(n=2, max_batch_size=6).to_dict()["concurrency"] == 6  # results.json records the number
