"""The one registration style (:class:`metaagent.registry.Registry`): decorators, lazy built-ins, and plugins
loaded from an installed distribution's entry points on the first lookup of their name."""

from __future__ import annotations

import sys

import pytest
from builders import install_fake_distribution

from metaagent.registry import Registry


class Boom(Exception):
    pass


def isolate(monkeypatch, registry: Registry) -> None:
    """What a test loads into one of the project's registries is gone after it."""
    monkeypatch.setattr(registry, "_table", dict(registry._table))


def test_register_get_names_and_refusals():
    reg: Registry = Registry("widget", Boom)

    @reg.register("a")
    def a(x, *, scale=2):
        return x * scale

    assert reg.get("a") is a and "a" in reg and list(reg) == ["a"] and reg.names() == ["a"]
    assert reg.options("a") == {"scale": 2}
    reg.register("a")(a)  # the same function again is fine
    with pytest.raises(Boom, match="widget 'a' is already registered"):
        reg.register("a")(lambda x: x)
    with pytest.raises(Boom, match=r"unknown widget 'b'; known: \['a'\]"):
        reg.get("b")
    with pytest.raises(Boom, match=r"widget 'a' has no option\(s\) \['size'\]; allowed: \['scale'\]"):
        reg.check_options("a", {"size": 1})
    with pytest.raises(Boom, match="non-empty string"):
        reg.register("")
    assert reg.find("b") is None and reg.find("a") is a
    with pytest.raises(ValueError, match="must start with 'metaagent.'"):
        Registry("widget", Boom, group="widgets")


def test_a_lazy_builtin_is_imported_at_its_first_use(tmp_path, monkeypatch):
    (tmp_path / "lazy_widgets.py").write_text("def big(x):\n    return x + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_widgets", raising=False)
    reg: Registry = Registry("widget", Boom)
    reg.register_lazy("big", "lazy_widgets:big")
    assert reg.names() == ["big"] and "big" in reg
    assert "lazy_widgets" not in sys.modules  # listed, not imported
    assert reg.get("big")(1) == 2
    assert "lazy_widgets" in sys.modules
    reg.register_lazy("broken", "lazy_widgets:missing")
    with pytest.raises(Boom, match="cannot load widget 'broken' from lazy_widgets:missing: AttributeError"):
        reg.get("broken")


def test_a_plugin_loads_from_its_entry_point_on_the_first_miss(tmp_path, monkeypatch):
    install_fake_distribution(
        tmp_path, monkeypatch, group="metaagent.test_widgets", module="fake_widgets",
        entries={"triple": "fake_widgets:triple", "selfreg": "fake_widgets:other", "bad": "fake_widgets:nope"},
        code="""
            LOADS = []
            def triple(x, *, k=3):
                return x * k
            def other(x):
                return -x
        """,
    )  # fmt: skip
    reg: Registry = Registry("widget", Boom, group="metaagent.test_widgets")

    @reg.register("builtin")
    def builtin(x):
        return x

    assert reg.names() == ["bad", "builtin", "selfreg", "triple"]  # the plugins are listed ...
    assert "triple" in reg and "nothing" not in reg
    assert "fake_widgets" not in sys.modules  # ... but not imported
    assert reg.get("triple")(2) == 6 and reg.options("triple") == {"k": 3}
    assert "fake_widgets" in sys.modules
    assert reg.get("selfreg")(2) == -2  # registered under the entry point's name
    with pytest.raises(Boom, match="cannot load widget 'bad' from entry point fake_widgets:nope"):
        reg.get("bad")
    with pytest.raises(Boom, match="unknown widget 'nothing'"):
        reg.get("nothing")


def test_a_plugin_credit_estimator_is_found_by_name_from_a_config(tmp_path, monkeypatch):
    """The project's own tables use it: an estimator of an installed package is a valid ``algo.estimator``."""
    install_fake_distribution(
        tmp_path, monkeypatch, group="metaagent.estimators", module="fake_estimators",
        entries={"fake_zero": "fake_estimators:zero"},
        code="""
            def zero(trees, *, scale=1.0):
                raise NotImplementedError  # looked up and checked here, never run
        """,
    )  # fmt: skip
    from metaagent.credit import estimator_options, list_estimators
    from metaagent.credit.registry import _ESTIMATORS
    from metaagent.train.config import AlgoConfig

    isolate(monkeypatch, _ESTIMATORS)
    assert "fake_zero" in list_estimators()
    assert AlgoConfig(estimator="fake_zero", options={"scale": 2.0}).estimator == "fake_zero"
    assert estimator_options("fake_zero") == {"scale": 1.0}
    with pytest.raises(Exception, match="has no option"):
        AlgoConfig(estimator="fake_zero", options={"size": 2})


TEMPLATE = """# name: {name}
# structure: single
# pattern: single
# domains: math
# description: One solver answers.
solver = Agent("Solver", "Solve the problem. Put the final answer in \\\\boxed{{}}.")
submit(solver(task))
"""


def test_a_plugin_template_bank_joins_the_default_bank(tmp_path, monkeypatch):
    from metaagent.workflow.templates import TEMPLATE_BANKS, TemplateError, load_templates

    isolate(monkeypatch, TEMPLATE_BANKS)

    bank = tmp_path / "bank"
    bank.mkdir()
    (bank / "plugin_single.py").write_text(TEMPLATE.format(name="plugin_single"))
    builtin = {t.name for t in load_templates()}
    install_fake_distribution(
        tmp_path, monkeypatch, group="metaagent.templates", module="fake_bank",
        entries={"fake_bank": "fake_bank:bank_dir"},
        code=f"""
            def bank_dir():
                return {str(bank)!r}
        """,
    )  # fmt: skip
    names = {t.name for t in load_templates()}
    assert names == builtin | {"plugin_single"}
    assert {t.name for t in load_templates(bank)} == {"plugin_single"}  # a given folder alone
    (bank / "dup.py").write_text(TEMPLATE.format(name=sorted(builtin)[0]))
    with pytest.raises(TemplateError, match="is used by both"):
        load_templates()


def test_a_plugin_policy_loss_is_a_valid_config_value_and_computes(tmp_path, monkeypatch):
    """``optim.policy_loss`` accepts an installed plugin's loss (checked without torch), the local loss finds it;
    the verl backend, which computes verl's own losses, refuses it by name."""
    install_fake_distribution(
        tmp_path, monkeypatch, group="metaagent.policy_losses", module="fake_losses",
        entries={"plain_pg": "fake_losses:plain_pg"},
        code="""
            from metaagent.learn.core_algos import agg_loss

            def plain_pg(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s, rollout_is_weights=None):
                loss = agg_loss(-advantages * log_prob, response_mask, loss_agg_mode, **s.global_batch_info)
                return loss, {}
        """,
    )  # fmt: skip
    import torch

    from metaagent.config import ConfigError
    from metaagent.learn import core_algos
    from metaagent.train.config import TrainConfig

    isolate(monkeypatch, core_algos.POLICY_LOSS_REGISTRY)
    cfg = TrainConfig.load("tiny", ["optim.policy_loss=plain_pg"])
    assert cfg.optim.policy_loss == "plain_pg"
    with pytest.raises(ConfigError, match="unknown policy loss 'plain_p'; known: vanilla"):
        TrainConfig.load("tiny", ["optim.policy_loss=plain_p"])
    logp = torch.tensor([[-1.0, -2.0]])
    loss, _ = core_algos.get_policy_loss_fn("plain_pg")(
        logp, logp, torch.tensor([[1.0, 1.0]]), torch.ones(1, 2), "token-mean", core_algos.LossSettings()
    )
    assert loss.item() == pytest.approx(1.5)
    from metaagent.train.verl_backend.plan import resolve_plan

    with pytest.raises(ConfigError, match="plain_pg is a plugin"):
        resolve_plan(TrainConfig.load("tiny", ["optim.policy_loss=plain_pg", "trainer.backend=verl"]))


def test_the_builtin_policy_losses_are_the_registered_ones():
    from metaagent.learn import core_algos
    from metaagent.learn.optim import POLICY_LOSSES

    assert core_algos.POLICY_LOSS_REGISTRY.names() == sorted(POLICY_LOSSES)
