"""Per-phase peak CUDA memory of a training step (``memory/cuda_peak_rollout_mib``, ``memory/cuda_peak_update_mib``):
read and reset per phase on a GPU, absent on CPU."""

from __future__ import annotations

import sys
import types

from metaagent.learn.metrics import cuda_peak_mib


def fake_torch(initialised: bool):
    state = {"peak": 3 * 2**20, "resets": 0}

    def reset():
        state["resets"] += 1
        state["peak"] = 0

    cuda = types.SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: initialised,
        max_memory_allocated=lambda: state["peak"], reset_peak_memory_stats=reset,
    )  # fmt: skip
    return types.SimpleNamespace(cuda=cuda), state


def test_the_peak_is_read_then_reset(monkeypatch):
    torch, state = fake_torch(initialised=True)
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert cuda_peak_mib() == 3.0 and state["resets"] == 1
    state["peak"] = 2**19
    assert cuda_peak_mib() == 0.5  # only what the next phase allocated


def test_no_number_without_cuda_in_use(monkeypatch):
    torch, state = fake_torch(initialised=False)  # CUDA present but this process never used it
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert cuda_peak_mib() is None and state["resets"] == 0
    monkeypatch.delitem(sys.modules, "torch")
    assert cuda_peak_mib() is None  # torch not even imported: nothing is imported for it
    assert "torch" not in sys.modules
