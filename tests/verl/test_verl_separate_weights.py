"""``policy.weights: separate`` on the verl backend: every designer call reaches the designer model's servers and
every agent call the executor model's, and each model's checkpoint restores into that model only.

The reference code's history shows both going wrong silently (every agent call sent to the designer's server in
split-policy mode; the executor's checkpoint overwriting the designer's). What runs here is the verl backend's
routing layer on CPU: :class:`~metaagent.train.verl_backend.backend.VerlBackend` (its policies, updates, run
directory and checkpoints), the real :class:`~metaagent.train.verl_backend.policy.ServerPolicy` of each model
talking token ids to a fake of verl's ``LLMServerClient`` (one per model: the servers verl launches for it), the
rollout engine, sandbox, rewards, credit and records. The FSDP workers are fakes that keep a weights version per
model (bumped by each update, written by ``save`` and read back by ``load``); verl's own FSDP checkpoint code
and vLLM are not run (tests/verl/test_verl_separate_cpu.py runs verl's real FSDP engine with the two models).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from metaagent.credit import TreeCredit, register_estimator
from metaagent.train.config import TrainConfig
from metaagent.train.loop import TrainLoop
from metaagent.train.verl_backend.backend import VerlBackend
from metaagent.train.verl_backend.policy import ServerPolicy
from metaagent.train.verl_backend.workers import ModelGroup
from metaagent.workflow import load_templates

pytestmark = pytest.mark.slow

EOS = 2
SCRIPT = {t.name: t.source for t in load_templates()}["solver_verifier"]
DESIGNER_MARKS = ("designer of a multi-agent team", "You design a team of agents")  # full / compact prompt


class CharTokenizer:
    """Characters are tokens (ord); the chat template joins 'role: content' lines."""

    chat_template = "{{ chars }}"
    eos_token_id = EOS
    pad_token_id = 0

    def get_vocab(self) -> dict[str, int]:
        return {"<eos>": EOS}

    def apply_chat_template(self, messages, add_generation_prompt, tokenize, return_dict, **kwargs):
        return [ord(c) for c in "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"]

    def decode(self, ids, skip_special_tokens):
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i == EOS))


@dataclass
class Output:  # the fields of verl's TokenOutput that ServerPolicy reads
    token_ids: list[int]
    log_probs: list[float]
    stop_reason: str = "completed"


@dataclass
class ModelServers:
    """One model's vLLM servers as ServerPolicy sees them (verl's ``LLMServerClient``): records every prompt and
    answers as that model would: the designer writes a workflow script (solver_verifier), the solver the sum in
    the delivery tag, the verifier VALID."""

    key: str
    prompts: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        text = "".join(chr(i) for i in prompt_ids)
        with self.lock:
            self.prompts.append(text)
        await asyncio.sleep(0)
        if any(mark in text for mark in DESIGNER_MARKS):
            reply = f"```python\n{SCRIPT}\n```"
        elif "You verify" in text.split("user: ")[0]:  # solver_verifier's verifier (its system prompt)
            reply = "<delivery>VALID</delivery>"
        else:
            a, op, b = re.findall(r"What is (\d+) ([+-]) (\d+)", text)[-1]
            value = int(a) + int(b) if op == "+" else int(a) - int(b)
            reply = f"<delivery>\\boxed{{{value}}}</delivery>"
        ids = [ord(c) for c in reply][: sampling_params["max_tokens"] - 1] + [EOS]
        return Output(ids, [-0.5] * len(ids))


class Workers:
    """One model's FSDP worker group: a weights version per model, bumped by each update; ``save`` writes it,
    ``load`` reads it back (the checkpoint folder it was given is recorded)."""

    def __init__(self, key: str, servers: ModelServers) -> None:
        self.key, self.dp_size, self.pad_id = key, 1, 0
        self.servers = servers
        self.policy = ServerPolicy(servers, CharTokenizer(), model_id=f"fake-{key}", max_model_len=200_000)
        self.version = 0
        self.updates: list[int] = []
        self.loaded: list[tuple[Path, dict]] = []

    def update(self, batch, *, step):
        self.updates.append(step)
        self.version += 1
        return {f"verl/{self.key}/actor/loss": 0.25}

    def sync_weights(self, step):
        return {}

    def free_rollout_memory(self):
        pass

    def save(self, path: Path, step: int) -> None:
        (path / "fsdp_config.json").write_text("{}")
        (path / "weights.json").write_text(json.dumps({"model": self.key, "version": self.version}))

    def load(self, path: Path) -> None:
        weights = json.loads((path / "weights.json").read_text())
        self.loaded.append((path, weights))
        self.version = weights["version"]

    def close(self) -> None:
        self.policy.close()


@register_estimator("ones_for_separate_weights")
def ones(trees):
    """Advantage 1 for every design and execution: each stage's active model updates (a step whose advantages
    are all 0 would rightly be skipped)."""
    return [
        TreeCredit(
            designer={i: 1.0 for i in range(len(t.designs))},
            executor={(i, j): 1.0 for i, d in enumerate(t.designs) for j in range(len(d.executions))},
        )
        for t in trees
    ]


def config(tmp_path: Path, steps: int) -> TrainConfig:
    return TrainConfig.load(None, [
        "data.train=[{source: bundled, split: train, levels: [1], domain: math}]", "data.mix={math: 1}",
        "data.batch_size=2", "rollout.m_designs=2", "rollout.n_executions=2", "rollout.k_templates=1",
        "rollout.sandbox_workers=2", "rollout.max_inflight=8", "rollout.limits={timeout_s: 20, max_agent_calls: 4}",
        "schedule.stage_len=1", f"trainer.steps={steps}", "trainer.save_every=1", "trainer.tensorboard=false",
        f"trainer.out={tmp_path / 'run'}", "trainer.backend=verl", "policy.weights=separate",
        "verl.models={designer: {gpus: 1}, executor: {gpus: 1, rollout_gpus: 1}}", "verl.n_gpus_per_node=4",
        "algo.estimator=ones_for_separate_weights",
    ])  # fmt: skip


def models() -> dict[str, Workers]:
    return {key: Workers(key, ModelServers(key)) for key in ("designer", "executor")}


def test_designer_calls_reach_the_designers_servers_and_agent_calls_the_executors(tmp_path):
    cfg = config(tmp_path, steps=1)
    groups = models()
    with TrainLoop(cfg, VerlBackend(cfg, groups=groups)) as trainer:
        (result,) = trainer.train()
    designer, executor = groups["designer"].servers.prompts, groups["executor"].servers.prompts
    assert len(designer) == 2 * 2  # B tasks x M designs, every one on the designer's servers
    assert all(any(m in p for m in DESIGNER_MARKS) for p in designer)
    assert executor and not any(any(m in p for m in DESIGNER_MARKS) for p in executor)  # agents only, all there
    assert sum("You verify" in p for p in executor) == sum("You solve" in p for p in executor) == 2 * 2 * 2  # B M N
    assert result.metrics["rollout/correct"] == 1.0  # each model answered its own kind of call


def test_each_models_checkpoint_restores_into_that_model_only(tmp_path):
    """Step 0 (executor stage) updates the executor only: the checkpoint holds executor version 1 and designer
    version 0, and on resume each comes back into its own model (not the other's); step 1 (designer stage) then
    moves the designer alone."""
    with TrainLoop(config(tmp_path, steps=1), VerlBackend(config(tmp_path, steps=1), groups=models())) as trainer:
        trainer.train()
    ckpt = tmp_path / "run" / "checkpoints" / "step_00000001"
    saved = {key: json.loads((ckpt / "verl" / key / "weights.json").read_text()) for key in ("designer", "executor")}
    assert saved == {"designer": {"model": "designer", "version": 0}, "executor": {"model": "executor", "version": 1}}

    cfg = config(tmp_path, steps=2)
    groups = models()
    with TrainLoop(cfg, VerlBackend(cfg, groups=groups), resume=True) as trainer:
        assert trainer.start_step == 1
        (result,) = trainer.train()
    for key, group in groups.items():
        ((path, weights),) = group.loaded
        assert path == ckpt / "verl" / key and weights["model"] == key
    assert groups["executor"].updates == [] and groups["executor"].version == 1
    assert groups["designer"].updates == [1] and groups["designer"].version == 1
    assert result.metrics["schedule/active"] == "designer"


class RecordingWorkerGroup:
    """verl's ``RayWorkerGroup`` as ``ModelGroup`` calls it for checkpoints."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def save_checkpoint(self, *, local_path, hdfs_path, global_step, max_ckpt_to_keep):
        self.calls.append(("save", local_path))

    def load_checkpoint(self, *, local_path, hdfs_path, del_local_after_load):
        self.calls.append(("load", local_path))


def test_a_model_group_saves_and_loads_through_its_own_workers_only(tmp_path):
    """The layer between the backend and verl: ``ModelGroup.save`` / ``load`` hand their folder to their own
    worker group; the other model's workers see nothing."""
    groups = {}
    for key in ("designer", "executor"):
        group = ModelGroup.__new__(ModelGroup)  # no verl workers started: only the checkpoint calls are used
        group.wg = RecordingWorkerGroup()
        groups[key] = group
    for key, group in groups.items():
        (tmp_path / key).mkdir()
        (tmp_path / key / "fsdp_config.json").write_text("{}")
        group.save(tmp_path / key, step=3)
        group.load(tmp_path / key)
    for key, group in groups.items():
        assert group.wg.calls == [("save", str(tmp_path / key)), ("load", str(tmp_path / key))]
