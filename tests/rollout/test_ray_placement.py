"""Placement of the Ray sandbox pool, without a cluster: the config keys, the refusals, the record's node field
and the ``rollout/nodes`` metrics (tests/train/test_ray_cluster.py runs it on a real two-node cluster)."""

from __future__ import annotations

import pytest

from metaagent.config import ConfigError
from metaagent.records import CheckReport, Design, Execution, RolloutTree
from metaagent.rollout.config import RolloutConfig
from metaagent.rollout.metrics import node_metrics, rollout_metrics
from metaagent.rollout.ray_pool import (
    RayPoolError,
    RaySandboxPool,
    actor_targets,
    node_capacity,
    spread_nodes,
)
from metaagent.train.config import TrainConfig
from metaagent.train.verl_backend.plan import resolve_plan


def tree(*nodes: str | None) -> RolloutTree:
    executions = [Execution(index=i, status="ok", node=n) for i, n in enumerate(nodes)]
    design = Design(index=0, source="frozen:sa", sample=None, script="x", check=CheckReport(ok=True),
                    executions=executions)  # fmt: skip
    return RolloutTree(run_id="r", task={"id": "t", "domain": "math"}, seed=0, config={}, models={}, designs=[design])


def test_node_metrics_count_the_nodes_and_the_busiest_ones_share():
    m = rollout_metrics([tree("a", "a", "b"), tree("a")])
    assert m["rollout/nodes"] == 2 and m["rollout/node_share_max"] == pytest.approx(3 / 4)
    assert node_metrics([tree("a", "b")])["rollout/node_share_max"] == 0.5  # spread evenly: 1 / nodes
    # this machine's sandbox pool names no node: no node metrics at all, not a 0
    assert "rollout/nodes" not in rollout_metrics([tree(None, None)])


def test_the_execution_node_round_trips_and_older_records_read_it_as_null():
    e = Execution(index=0, status="ok", node="f3a9")
    assert Execution.from_dict(e.to_dict()).node == "f3a9"
    old = {k: v for k, v in e.to_dict().items() if k != "node"}
    assert Execution.from_dict(old).node is None


def test_the_placement_keys_default_to_spread_and_refuse_what_cannot_place():
    cfg = RolloutConfig(ray_address="head:6379", ray_resource="sandbox")
    assert (cfg.ray_placement, cfg.ray_resource) == ("spread", "sandbox")
    with pytest.raises(ConfigError, match="ray_resource='sandbox'.*rollout.ray_address is not set"):
        RolloutConfig(ray_resource="sandbox")
    with pytest.raises(ConfigError, match="ray_placement"):
        RolloutConfig(ray_address="local", ray_placement="pack")
    with pytest.raises(RayPoolError, match="ray_placement must be one of"):  # before Ray starts
        RaySandboxPool("local", placement="pack")


def node(name: str, alive: bool = True, **resources: float) -> dict:
    return {"NodeID": name, "Alive": alive, "Resources": {"CPU": 8.0, **resources}}


def test_spread_pins_the_actors_round_robin_to_the_alive_nodes():
    nodes = [node("head"), node("w1"), node("dead", alive=False), node("w2")]
    assert spread_nodes(nodes, 5) == ["head", "w1", "w2", "head", "w1"]
    assert spread_nodes(nodes[:1], 3) == ["head"] * 3  # one machine: every actor on it


def test_a_resource_keeps_the_actors_on_the_nodes_that_advertise_it_up_to_their_amount():
    nodes = [node("head"), node("w1", sandbox=1.0), node("w2", sandbox=3.0), node("gone", alive=False, sandbox=9.0)]
    assert spread_nodes(nodes, 4, "sandbox") == ["w1", "w2", "w2", "w2"]
    with pytest.raises(RayPoolError, match=r"advertise 4 of it, but rollout.sandbox_workers=5.*--resources"):
        spread_nodes(nodes, 5, "sandbox")
    with pytest.raises(RayPoolError, match="advertise 0 of it"):  # a typo of the name
        spread_nodes(nodes, 1, "sandbx")


def test_the_default_placement_pins_nothing_but_checks_the_resource_capacity():
    nodes = [node("head"), node("w1", sandbox=1.0), node("w2", sandbox=1.0)]
    assert actor_targets(nodes, 2, "default", "sandbox") == []  # Ray places them: no spread targets computed
    assert actor_targets(nodes, 3, "default", None) == []  # no resource: nothing to check
    assert actor_targets(nodes, 2, "spread", "sandbox") == ["w1", "w2"]
    with pytest.raises(RayPoolError, match=r"advertise 2 of it, but rollout.sandbox_workers=3"):
        actor_targets(nodes, 3, "default", "sandbox")
    assert node_capacity(nodes, 2, "sandbox") == {"head": 0, "w1": 1, "w2": 1}
    with pytest.raises(RayPoolError, match="no alive node"):
        node_capacity([node("gone", alive=False, sandbox=4.0)], 1, "sandbox")


def test_the_default_placement_does_not_go_through_the_spread_targets(monkeypatch):
    import metaagent.rollout.ray_pool as ray_pool

    def refuse(*args, **kwargs):
        raise AssertionError("spread targets computed for the default placement")

    monkeypatch.setattr(ray_pool, "spread_nodes", refuse)
    assert actor_targets([node("w1", sandbox=2.0)], 2, "default", "sandbox") == []


@pytest.mark.parametrize(
    ("rollout", "verl", "ok"),
    [("local", None, True), ("head:6379", "head:6379", True), ("head:6379", None, False), ("local", "head:6379", False)],
)
def test_the_verl_backend_and_the_sandbox_pool_join_one_cluster(rollout, verl, ok):
    overrides = [f"rollout.ray_address={rollout}"] + ([f"verl.ray_address={verl}"] if verl else [])
    cfg = TrainConfig.load("tiny_verl_cpu", overrides)
    if ok:
        resolve_plan(cfg)
        return
    with pytest.raises(ConfigError, match="one trainer process joins one Ray cluster"):
        resolve_plan(cfg)
