"""The loop takes its backend, by name (``trainer.backend``, a plugin's too) or given: both backends derive from
:class:`metaagent.train.backend.Backend` with the same signatures, a capability a backend lacks is refused by the
base class in one line, and a configuration that needs more than a backend can train is refused in one line before any
model loads or the run directory is touched."""

from __future__ import annotations

import inspect
import sys

import pytest

from metaagent.config import ConfigError
from metaagent.train.backend import Backend, BackendError, Capabilities, Needs, make_backend
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


def test_the_backend_is_chosen_by_name_and_only_its_module_is_imported():
    """``trainer.backend`` names the backend (``make_backend``); a local run never imports the verl backend."""
    import subprocess

    code = (
        "import sys\n"
        "from metaagent.train.config import TrainConfig\n"
        "from metaagent.train.backend import make_backend\n"
        "b = make_backend(TrainConfig.load('tiny'))\n"
        "print(type(b).__name__, 'metaagent.train.verl_backend.backend' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["LocalBackend", "False"]
    from metaagent.train.backend import BACKENDS

    assert BACKENDS.get("verl") is VerlBackend and BACKENDS.get("local") is LocalBackend
    with pytest.raises(ConfigError, match="trainer.backend = 'vrl': unknown training backend 'vrl'; known: local, verl"):
        TrainConfig.load("tiny", ["trainer.backend=vrl"])


def test_a_capability_a_backend_lacks_is_refused_by_the_base_class_in_one_line():
    class Bare(Backend):
        name = "bare"

        def start(self, needs): ...
        def run_info(self): ...
        def restore(self, path): ...
        def policies(self, step): ...
        def update(self, samples, step, active, pairs): ...
        def save(self, run_dir, next_step, *, state, designer_prompt): ...

    bare = Bare()
    assert bare.check_samples([], [], {}) == {} and bare.close() is None
    for call, capability in [
        (lambda: bare.ref_logprobs([]), "ref_logprobs"), (lambda: bare.values([]), "critic"),
        (bare.reset_optimizer_moments, "reset_moments"), (lambda: bare.model_key(None), "token_advantages"),
    ]:  # fmt: skip
        with pytest.raises(BackendError, match=rf"the bare backend .*\(capabilities\.{capability} is false\)"):
            call()
    with pytest.raises(TypeError, match="abstract"):
        type("Half", (Backend,), {"start": lambda self, needs: None})()


PLUGIN = '''
from metaagent.train.backend import Backend, Capabilities

class Plugged(Backend):
    """A plugin's backend that can train nothing; it records what the loop asked of it."""

    name = "plugged"
    made = []

    def __init__(self, config, **options):
        self.config, self.options, self.started, self.closed = config, options, [], 0
        Plugged.made.append(self)

    def start(self, needs):
        self.started.append(needs)

    def run_info(self): ...
    def restore(self, path): ...
    def policies(self, step): ...
    def update(self, samples, step, active, pairs): ...
    def save(self, run_dir, next_step, *, state, designer_prompt): ...

    def close(self):
        self.closed += 1
'''


def test_a_plugin_backend_is_named_in_the_config_and_built_by_the_loop(tmp_path, monkeypatch):
    from builders import install_fake_distribution

    from metaagent.train.backend import BACKENDS

    install_fake_distribution(
        tmp_path / "site", monkeypatch, group="metaagent.backends", module="fake_backend",
        entries={"plugged": "fake_backend:Plugged"}, code=PLUGIN,
    )  # fmt: skip
    monkeypatch.setattr(BACKENDS, "_table", dict(BACKENDS._table))
    out = tmp_path / "run"
    cfg = TrainConfig.load("unity_code", ["trainer.backend=plugged", "algo.options={mode: gae}", f"trainer.out={out}"])
    with pytest.raises(TrainError, match="needs a critic per model, which the plugged backend does not train"):
        TrainLoop(cfg)  # no backend given: the one trainer.backend names
    (made,) = sys.modules["fake_backend"].Plugged.made
    assert made.config is cfg and made.started == [] and made.closed == 1 and not out.exists()
