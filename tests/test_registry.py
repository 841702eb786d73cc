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


DOMAIN_PLUGIN = """
    from metaagent.domain import Domain, Verdict, register_domain

    def score(task, execution, cfg):
        return Verdict(float((execution.answer or "").strip() == task.answer))

    PARITY = register_domain(Domain(
        name="parity", reference="gold answer", has_reference=lambda task: task.answer in ("even", "odd"),
        score=score, solution_format=lambda answer, fences: 1.0,
    ))
"""

ENV_PLUGIN = """
    from metaagent.envs import PlanEnv, register_env

    @register_env
    class Counter(PlanEnv):
        name = "counter"
        rules = "Count up to {size}. Answer with the next number."
        default_size = 3

        def __init__(self, spec):
            super().__init__(spec)
            self.size, self.value = int(spec.get("size", self.default_size)), int(spec["seed"]) % 2

        @property
        def success(self):
            return self.value >= self.size

        def observe(self):
            return f"value {self.value} of {self.size}"

        def apply(self, answer):
            self.value += 1
            return {}
"""

SOURCE_PLUGIN = """
    from metaagent.data import Source, Task

    def row(row, index, spec):
        return Task(id=f"sq-{index}", domain="math", question=f"What is {row['n']} squared?",
                    answer=str(row["n"] ** 2), source="squares", split=spec.split_name)

    SQUARES = Source("squares", "math", None, "train", row, rows=lambda spec: [{"n": n} for n in range(3)])
"""


def test_a_plugin_domain_environment_and_source_load_from_entry_points(tmp_path, monkeypatch):
    """Domains, planning environments and data sources are Registry tables like every other: an installed
    distribution's entry points (groups metaagent.domains, metaagent.envs, metaagent.sources) are listed
    without being imported and load on the first lookup of their name; an environment's data source follows
    from it."""
    import metaagent.domain as registry
    from metaagent.data import Task, get_source, load_tasks, source_names
    from metaagent.data.sources import SOURCES
    from metaagent.envs import ENVS, env_names, make_env

    for table in (registry.DOMAINS, ENVS, SOURCES):
        isolate(monkeypatch, table)
    for group, module, entries, code in (
        ("metaagent.domains", "fake_parity", {"parity": "fake_parity:PARITY"}, DOMAIN_PLUGIN),
        ("metaagent.envs", "fake_counter", {"counter": "fake_counter:Counter"}, ENV_PLUGIN),
        ("metaagent.sources", "fake_squares", {"squares": "fake_squares:SQUARES"}, SOURCE_PLUGIN),
    ):
        install_fake_distribution(tmp_path / module, monkeypatch, group=group, module=module, entries=entries,
                                  code=code)  # fmt: skip

    assert "parity" in registry.domain_names() and "counter" in env_names() and "squares" in SOURCES.names()
    assert not {"fake_parity", "fake_counter", "fake_squares"} & set(sys.modules)  # listed, none imported
    assert {"counter", "squares"} <= set(source_names())  # (this loads the domains: they register sources)
    assert Task(id="p", domain="parity", question="Is 3 even or odd?", answer="odd").domain == "parity"
    assert registry.get_domain("parity") is sys.modules["fake_parity"].PARITY
    assert make_env({"name": "counter", "seed": 1}).observe() == "value 1 of 3"
    boards = load_tasks({"source": "counter", "split": "test", "limit": 2})
    assert [t.domain for t in boards] == ["plan", "plan"] and get_source("counter").domain == "plan"
    assert [t.answer for t in load_tasks("squares:train")] == ["0", "1", "4"]


def test_a_domain_entry_point_must_name_a_domain_of_its_name(tmp_path, monkeypatch):
    import metaagent.domain as registry

    isolate(monkeypatch, registry.DOMAINS)
    install_fake_distribution(
        tmp_path, monkeypatch, group="metaagent.domains", module="fake_parity",
        entries={"odd_even": "fake_parity:PARITY"}, code=DOMAIN_PLUGIN,
    )  # fmt: skip
    with pytest.raises(registry.DomainError, match="entry point 'odd_even' of group metaagent.domains must"):
        registry.get_domain("odd_even")


def test_every_extension_table_is_a_registry_and_the_extension_points_take_plugins():
    """One registration style: each extension table of the package is a Registry (none a dict that a
    register function fills); estimators, losses, template banks, domains, environments and backends load
    plugins."""
    from package_graph import PLUGIN_KINDS, extension_tables

    tables = extension_tables()
    assert [t for t in tables if t.style != "Registry"] == []
    kinds = {t.kind: t.group for t in tables}
    assert {k: kinds.get(k, "no table") for k in PLUGIN_KINDS if not kinds.get(k)} == {}
    assert len(tables) >= 14


def test_the_table_inventory_finds_another_registration_style():
    """The inventory would report a dict filled by a register function (the style domains had), and a
    Registry's group given by a constant."""
    import ast

    from package_graph import PACKAGE, Package, extension_tables

    package = Package()
    fake = "metaagent.policy.fake_tables"
    package.paths[fake] = PACKAGE / "policy" / "fake_tables.py"
    package.trees[fake] = ast.parse(
        "GROUP = 'metaagent.widgets'\n"
        "WIDGETS = Registry('widget', ValueError, group=GROUP)\n"
        "_TABLE: dict[str, object] = {}\n"
        "_CACHE = {}\n"
        "def register_thing(name, thing):\n"
        "    _TABLE[name] = thing\n"
        "def remember(key, value):\n"
        "    _CACHE[key] = value\n"
    )
    found = {(t.name, t.style, t.kind, t.group) for t in extension_tables(package) if "fake_" in t.where}
    assert found == {
        ("WIDGETS", "Registry", "widget", "metaagent.widgets"), ("_TABLE", "dict", "register_thing", None),
    }  # fmt: skip
