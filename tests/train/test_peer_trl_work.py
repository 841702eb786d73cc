"""benchmarks/peer_trl.py's metaagent side is the default config plus its overrides: they must still load.

The script runs for tens of minutes, so a config key that the project renamed or refused would only show after
the model load; this test loads the exact override lists (every precision) without a model.
"""

from __future__ import annotations

import pytest

from metaagent.data.loaders import load_tasks
from metaagent.train.config import TrainConfig
from builders import benchmark_script


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_the_peer_work_loads_as_a_config_of_math_tasks_only(precision, tmp_path):
    peer = benchmark_script("peer_trl")
    cfg = TrainConfig.load("default", [*peer.WORK, *peer.PRECISIONS[precision], f"trainer.out={tmp_path}"])
    assert cfg.data.batch_size == peer.TASKS
    assert cfg.rollout.n_executions == peer.G
    assert cfg.rollout.executor.stop == []
    tasks = [t for spec in cfg.data.train for t in load_tasks(spec)]
    assert tasks and {t.domain for t in tasks} == {"math"}
    assert cfg.data.batch_mix({"math"}) == {"math": 1}
    if precision == "fp32":
        assert cfg.policy.dtype == "float32" and cfg.optim.autocast is None
