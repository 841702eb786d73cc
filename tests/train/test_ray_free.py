"""The local backend needs neither Ray nor verl: a training step runs in a process where both are absent.

Every ``verl.*`` import pulls Ray (``verl/__init__`` -> ``verl.protocol`` -> ``import ray``), so the local
losses are a port of verl's functions (``metaagent.learn.core_algos``). The child process installs a
meta-path hook that refuses ``ray`` and ``verl`` as an uninstalled package would, then runs
``train-metaagent`` for one step of the tiny model with a frozen template designer (so executor samples
exist and the loss is computed).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BLOCK = textwrap.dedent(
    """
    import importlib.abc, sys

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("ray", "verl"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    sys.meta_path.insert(0, Absent())
    """
)


def run_child(body: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCK + textwrap.dedent(body)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def test_the_hook_makes_ray_and_verl_absent(tmp_path):
    r = run_child(
        """
        for name in ("ray", "verl", "verl.trainer.ppo.core_algos"):
            try:
                __import__(name)
            except ModuleNotFoundError:
                continue
            raise SystemExit(f"{name} imported through the hook")
        print("absent")
        """,
        tmp_path,
    )
    assert r.returncode == 0 and "absent" in r.stdout, r.stdout + r.stderr


@pytest.mark.slow
def test_a_local_training_step_runs_without_ray_or_verl(tmp_path):
    out = tmp_path / "run"
    r = run_child(
        f"""
        import runpy, sys
        sys.argv = ["train-metaagent", "--config", "tiny", "--steps", "1", "--out", {str(out)!r}, "--quiet",
                    "rollout.frozen_designer=single_math", "trainer.save_every=0"]
        try:
            runpy.run_module("metaagent.cli.train", run_name="__main__")
        except SystemExit as e:
            if e.code:
                raise
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("ray", "verl"))
        assert not loaded, loaded
        """,
        tmp_path,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (metrics,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["samples/executor"] > 0
    assert "train/pg_loss" in metrics  # the policy loss was computed (by the ported functions)
