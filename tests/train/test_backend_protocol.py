"""The loop takes its backend: both backends implement :class:`metaagent.train.backend.Backend` with the same
signatures, and a configuration that needs more than a backend can train is refused in one line before any
model loads or the run directory is touched."""

from __future__ import annotations

import inspect

import pytest

from metaagent.train.backend import Backend, Capabilities, Needs
from metaagent.train.config import TrainConfig
from metaagent.train.local import LocalBackend
from metaagent.train.loop import TrainError, TrainLoop
from metaagent.train.verl_backend.backend import VerlBackend

METHODS = sorted(n for n, v in vars(Backend).items() if inspect.isfunction(v) and not n.startswith("_"))


def test_the_protocol_lists_what_the_loop_calls():
    assert METHODS == [
        "check_samples", "close", "model_key", "policies", "ref_logprobs", "reset_optimizer_moments", "restore",
        "run_info", "save", "start", "update", "values",
    ]  # fmt: skip


@pytest.mark.parametrize("cls", [LocalBackend, VerlBackend])
def test_each_backend_implements_every_method_with_the_protocols_parameters(cls):
    for name in METHODS:
        want = list(inspect.signature(getattr(Backend, name)).parameters)
        assert list(inspect.signature(getattr(cls, name)).parameters) == want, f"{cls.__name__}.{name}"
    assert isinstance(cls.capabilities, Capabilities) and cls.name in ("local", "verl")


class Unstarted:
    """A backend that can train nothing; it records whether the loop started or closed it."""

    name = "bare"
    capabilities = Capabilities()

    def __init__(self) -> None:
        self.started: list[Needs] = []
        self.closed = 0

    def start(self, needs: Needs) -> None:
        self.started.append(needs)

    def close(self) -> None:
        self.closed += 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo.options={mode: gae}"], "needs a critic per model, which the bare backend does not train"),
        (["optim.stage_switch=reset"], "the bare backend does not support optim.stage_switch=reset"),
    ],
)
def test_a_config_the_backend_cannot_train_is_refused_before_anything_loads(tmp_path, overrides, message):
    out = tmp_path / "run"
    cfg = TrainConfig.load("unity_code", [*overrides, f"trainer.out={out}"])
    backend = Unstarted()
    with pytest.raises(TrainError, match=message) as e:
        TrainLoop(cfg, backend)
    assert "\n" not in str(e.value)
    assert backend.started == [] and backend.closed == 1 and not out.exists()
