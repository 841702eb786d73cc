"""The verl backend's loop on CPU with fake model groups: schedule -> rollout -> credit -> masked batches.

The model groups (verl worker groups + vLLM on GPUs in a real run) are replaced by fakes that generate with a
ScriptedPolicy and record every ``update_actor`` batch and weight sync; the rollout engine, sandbox, rewards,
credit, records, samples, batch adapter, estimator check, run directory and checkpoints are the real ones.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from metaagent.credit import TreeCredit, register_estimator
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.train.config import TrainConfig
from metaagent.train.verl_backend.plan import resolve_plan
from metaagent.train.loop import TrainLoop
from metaagent.train.verl_backend.backend import VerlBackend
from metaagent.workflow import load_templates

SCRIPTS = {t.name: t.source for t in load_templates()}


def reply(request: ChatRequest) -> str:
    """Designer: a valid single-agent or verifier workflow, or no script (invalid); agents: right or wrong."""
    seed = request.sampling.seed or 0
    if request.role == "designer":
        if seed % 3 == 0:
            return "I cannot write code today."
        name = "single_math" if seed % 3 == 1 else "solver_verifier"
        return f"```python\n{SCRIPTS[name]}\n```"
    if "CORRECT" in request.messages[0]["content"]:
        return "Checked. <delivery>CORRECT</delivery>"
    text = "\n".join(m["content"] for m in request.messages)
    a, op, b = re.search(r"What is (\d+) ([+-]) (\d+)", text).groups()
    value = int(a) + int(b) if op == "+" else int(a) - int(b)
    value += seed % 2  # every other agent call is off by one
    return f"{a} {op} {b} = {value}. <delivery>\\boxed{{{value}}}</delivery>"


class FakeGroup:
    def __init__(self, key: str, dp_size: int) -> None:
        self.key, self.dp_size, self.pad_id = key, dp_size, 0
        self.policy = ScriptedPolicy(reply, model_id=f"fake-{key}")
        self.updates: list = []
        self.syncs: list[int] = []
        self.sleeps = 0
        self.saved: list[int] = []

    def update(self, batch, *, step):
        self.updates.append((step, batch))
        return {f"verl/{self.key}/actor/loss": 0.25, f"verl/{self.key}/actor/grad_norm": 1.0}

    def sync_weights(self, step):
        self.syncs.append(step)
        return {}

    def free_rollout_memory(self):
        self.sleeps += 1

    def save(self, path: Path, step: int) -> None:
        (path / "fsdp_config.json").write_text("{}")
        self.saved.append(step)

    def load(self, path: Path) -> None:
        assert (path / "fsdp_config.json").is_file()

    def close(self) -> None:
        self.policy.close()


def config(tmp_path, *overrides):
    base = [
        "data.train=[{source: bundled, split: train, levels: [1], domain: math}]",
        "data.mix={math: 1}",
        "data.batch_size=2",
        "rollout.m_designs=3",
        "rollout.n_executions=2",
        "rollout.k_templates=1",
        "rollout.sandbox_workers=2",
        "rollout.max_inflight=8",
        "rollout.limits={timeout_s: 20, max_agent_calls: 4}",
        "schedule.stage_len=1",
        "trainer.steps=2",
        "trainer.save_every=0",
        "trainer.tensorboard=false",
        f"trainer.out={tmp_path / 'run'}",
        "trainer.backend=verl",
        "verl.n_gpus_per_node=2",
    ]
    return TrainConfig.load(None, base + list(overrides))


@register_estimator("ones_for_routing_tests")
def ones(trees):
    """Advantage 1 for every design and execution: the routing tests need an update every step, and a step
    whose advantages are all 0 is (rightly) skipped."""
    return [
        TreeCredit(
            designer={i: 1.0 for i in range(len(t.designs))},
            executor={(i, j): 1.0 for i, d in enumerate(t.designs) for j in range(len(d.executions))},
        )
        for t in trees
    ]


ALWAYS_UPDATE = "algo.estimator=ones_for_routing_tests"


def roles_in(batch):
    nt = batch.data.non_tensor_batch
    return set(nt["mas_role"][~nt["is_padding"]])


@pytest.mark.slow
def test_stagewise_steps_send_only_the_active_roles_samples(tmp_path):
    cfg = config(tmp_path, ALWAYS_UPDATE)
    group = FakeGroup("policy", dp_size=2)
    with TrainLoop(cfg, VerlBackend(cfg, plan=resolve_plan(cfg), groups={"policy": group})) as trainer:
        results = trainer.train()
    assert [r.metrics["schedule/active"] for r in results] == ["executor", "designer"]  # K = 1
    (s0, b0), (s1, b1) = group.updates
    assert (s0, s1) == (0, 1)
    assert roles_in(b0) == {"executor"} and roles_in(b1) == {"designer"}
    for batch in (b0, b1):
        assert len(batch.data) % 2 == 0 and len(batch.data) >= 2  # DP-divisible, no empty rank
    assert (
        b1.real_rows == results[1].metrics["train/samples/designer"] == results[1].metrics["samples/designer"]
    )
    assert group.syncs == [0, 1, 2]  # start, then after each update
    assert group.sleeps == 2
    m = results[0].metrics
    assert m["credit/verl_check_skipped"] == 1.0  # the routing estimator has no verl counterpart
    assert m["train/loss"] == 0.25 and m["verl/policy/skipped_step"] == 0.0

    run = Path(cfg.trainer.out)
    assert (run / "rollouts" / "step_000000.jsonl").is_file() and (
        run / "rollouts" / "step_000001.jsonl"
    ).is_file()
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 1]
    assert json.loads((run / "run.json").read_text())["backend"] == "verl"
    assert group.saved == [2]  # the final checkpoint
    meta = json.loads((run / "checkpoints" / "step_00000002" / "meta.json").read_text())
    assert meta["backend"] == "verl" and meta["models"] == {"policy": "verl/policy"}


@pytest.mark.slow
def test_a_model_without_samples_gets_no_update_at_all(tmp_path):
    """Separate weights, executor stage: the designer model is not called (true masking, optimizer untouched)."""
    cfg = config(
        tmp_path,
        "policy.weights=separate",
        "verl.models={designer: {gpus: 1}, executor: {gpus: 1, rollout_gpus: 1}}",
        "verl.n_gpus_per_node=4",
        "trainer.steps=1",
        ALWAYS_UPDATE,
    )
    designer, executor = FakeGroup("designer", 1), FakeGroup("executor", 1)
    with TrainLoop(cfg, VerlBackend(cfg, groups={"designer": designer, "executor": executor})) as trainer:
        (result,) = trainer.train()
    assert designer.updates == [] and designer.syncs == [0] and designer.sleeps == 0
    assert len(executor.updates) == 1 and roles_in(executor.updates[0][1]) == {"executor"}
    assert (
        result.metrics["verl/designer/skipped_step"] == 1.0 and result.metrics["verl/designer/samples"] == 0.0
    )
    assert result.metrics["train/executor/loss"] == 0.25
    assert len(designer.policy.calls) > 0 and all(c.role == "designer" for c in designer.policy.calls)
    assert all(c.role != "designer" for c in executor.policy.calls)


@pytest.mark.slow
def test_resume_continues_from_the_checkpoint(tmp_path):
    cfg = config(tmp_path, "trainer.steps=1")
    with TrainLoop(cfg, VerlBackend(cfg, groups={"policy": FakeGroup("policy", 2)})) as trainer:
        trainer.train()
    cfg2 = config(tmp_path, "trainer.steps=2")
    group = FakeGroup("policy", 2)
    with TrainLoop(cfg2, VerlBackend(cfg2, groups={"policy": group}), resume=True) as trainer:
        assert trainer.start_step == 1
        (result,) = trainer.train()
    assert result.step == 1 and result.metrics["schedule/active"] == "designer"
    assert [s for s, _ in group.updates] == [1] and group.syncs[0] == 1
