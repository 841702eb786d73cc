"""Checkpoints: HF-format weights usable as --model, optimizer state, JSON state and RNG, atomic writes."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from metaagent.learn.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    model_path,
    save_checkpoint,
)
from metaagent.train.schedule import StageSchedule
from metaagent.train.local.update import PolicyUpdater


def test_save_and_resume(tmp_path, make_model, make_samples):
    model = make_model(seed=1)
    updater = PolicyUpdater(model, lr=1e-3)
    updater.update(make_samples(4))
    schedule = StageSchedule("stagewise", 5)
    state = {"schedule": schedule.state_dict(), "sampler": {"epoch": 2, "position": 17}}
    path = save_checkpoint(
        tmp_path, 12, models={"policy": model}, optimizers={"policy": updater}, state=state
    )
    assert path == tmp_path / "checkpoints" / "step_00000012" and latest_checkpoint(tmp_path) == path
    expected_draws = (random.random(), float(np.random.rand()), float(torch.rand(())))

    # a valid --model path: plain transformers loads it
    from transformers import AutoModelForCausalLM

    fresh = AutoModelForCausalLM.from_pretrained(model_path(path, "policy"), dtype=torch.float32)
    for (n, a), (_, b) in zip(model.named_parameters(), fresh.named_parameters()):
        assert torch.equal(a, b), n

    # resume into new objects
    other = make_model(seed=2)
    other_updater = PolicyUpdater(other, lr=1e-3)
    loaded = load_checkpoint(path, models={"policy": other}, optimizers={"policy": other_updater})
    assert loaded == {**state, "step": 12}
    assert StageSchedule.from_state_dict(loaded["schedule"]) == schedule
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))
    assert other_updater.steps == 1
    s1, s2 = updater.optimizer.state_dict()["state"], other_updater.optimizer.state_dict()["state"]
    assert all(torch.equal(s1[k]["exp_avg_sq"], s2[k]["exp_avg_sq"]) for k in s1)
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == expected_draws
    assert "rng" in json.loads((path / "state.json").read_text())  # plain JSON, nothing pickled


def test_tied_weights_load_in_place(tmp_path, make_model):
    model = make_model(seed=3, tie=True)
    path = save_checkpoint(tmp_path, 0, models={"policy": model})
    other = make_model(seed=4, tie=True)
    load_checkpoint(path, models={"policy": other})
    assert torch.equal(other.lm_head.weight, model.lm_head.weight)


def test_separate_models_and_latest(tmp_path, make_model):
    d, e = make_model(seed=1), make_model(seed=2)
    for step in (3, 10, 7):
        save_checkpoint(tmp_path, step, models={"designer": d, "executor": e}, state={"step_seen": step})
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000003", "step_00000007", "step_00000010"]
    latest = latest_checkpoint(tmp_path)
    assert latest.name == "step_00000010" and model_path(latest, "executor").is_dir()
    with pytest.raises(CheckpointError, match="no model 'policy'"):
        model_path(latest, "policy")
    save_checkpoint(tmp_path, 11, models={"designer": d}, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000010", "step_00000011"]


def test_writes_are_atomic(tmp_path, make_model):
    good = make_model()
    save_checkpoint(tmp_path, 1, models={"policy": good})

    class Exploding(torch.nn.Module):
        def save_pretrained(self, out, **_):
            out.mkdir(parents=True)
            (out / "model.safetensors").write_bytes(b"partial")
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, 2, models={"policy": Exploding()})
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["step_00000001"]  # no partial step_2, no temp folder
    (root / "step_00000005").mkdir()  # e.g. copied by hand, no meta.json: not a checkpoint
    assert latest_checkpoint(tmp_path).name == "step_00000001"
    # re-saving an existing step replaces it
    save_checkpoint(tmp_path, 1, models={"policy": good}, state={"again": True})
    assert load_checkpoint(latest_checkpoint(tmp_path), restore_rng=False)["again"] is True
    assert latest_checkpoint(tmp_path / "nowhere") is None


def test_bad_state_is_refused(tmp_path, make_model):
    with pytest.raises(CheckpointError, match="JSON-serialisable"):
        save_checkpoint(tmp_path, 0, models={"policy": make_model()}, state={"sampler": object()})
    with pytest.raises(CheckpointError, match="reserved"):
        save_checkpoint(tmp_path, 0, models={"policy": make_model()}, state={"rng": 1})
    with pytest.raises(CheckpointError, match="simple name"):
        save_checkpoint(tmp_path, 0, models={"../x": make_model()})
    assert list_checkpoints(tmp_path) == []
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        load_checkpoint(tmp_path)
