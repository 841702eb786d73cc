"""verl backend with policy.lora and a KL term: the reference is the actor with its adapter off (verl's
``ref_in_actor``), so no reference worker is started, split placement may have a KL term, and (slow, verl's real
FSDP engine on CPU, in-process like test_verl_parity.py) the reference log-probs equal the base model's after an
update has moved the adapter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metaagent.config import ConfigError
from metaagent.train.config import TrainConfig
from metaagent.train.verl_backend.plan import resolve_plan
from metaagent.train.verl_backend.verl_config import compose_verl_config
from metaagent.train.verl_backend.workers import ModelGroup, ref_in_actor

ROOT = Path(__file__).resolve().parents[2]
SPLIT = ["verl.n_gpus_per_node=2", "verl.models={policy: {gpus: 1, rollout_gpus: 1}}"]
LORA = ["policy.lora.enabled=true", "policy.lora.rank=4", "policy.lora.alpha=8"]


def _group(*overrides: str) -> ModelGroup:
    cfg = TrainConfig.load("tiny_verl_cpu", list(overrides))
    plan = resolve_plan(cfg)
    vc = compose_verl_config(cfg, plan, plan.models[0], run_dir="/tmp/lora_ref")
    return ModelGroup(plan.models[0], vc, plan.verl, tokenizer=None)


class _Workers:
    """Records which worker-group method computed the reference and with what metadata."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def _call(self, name: str, td):
        from verl.utils import tensordict_utils as tu

        self.calls.append((name, bool(tu.get(td, "no_lora_adapter", default=False))))
        return td.select().update({"log_probs": td["input_ids"].float() * 0})  # nested: same layout as the input

    def compute_log_prob(self, td):
        return self._call("compute_log_prob", td)

    def compute_ref_log_prob(self, td):
        return self._call("compute_ref_log_prob", td)


def test_lora_kl_runs_without_a_reference_worker_and_asks_the_actor_with_the_adapter_off():
    from builders import random_samples

    from metaagent.train.verl_backend.batch import build_update_batch

    plain, lora = _group("optim.kl_coef=0.01"), _group("optim.kl_coef=0.01", *LORA)
    assert (plain.role, plain.ref_in_actor) == ("actor_rollout_ref", False)  # a full reference model in the worker
    assert (lora.role, lora.ref_in_actor) == ("actor_rollout", True)  # the actor's base is the reference
    assert ref_in_actor(lora.config) and not ref_in_actor(plain.config)
    assert _group(*LORA).role == "actor_rollout" and not _group(*LORA).ref_in_actor  # no KL: no reference at all

    batch = build_update_batch(random_samples(4, seed=0), dp_size=1, pad_id=0, loss_agg_mode="token-mean")
    for group, want in ((plain, ("compute_ref_log_prob", False)), (lora, ("compute_log_prob", True))):
        group.wg = _Workers()
        group.reference_log_probs(batch)
        assert group.wg.calls == [want] and "ref_log_prob" in batch.data.batch


def test_split_placement_may_have_a_kl_term_with_lora_only():
    with pytest.raises(ConfigError, match="reference model"):
        resolve_plan(TrainConfig.load("tiny_verl_cpu", [*SPLIT, "optim.kl_coef=0.01"]))
    plan = resolve_plan(TrainConfig.load("tiny_verl_cpu", [*SPLIT, "optim.kl_coef=0.01", *LORA]))
    assert not plan.models[0].colocated
    cfg = TrainConfig.load("tiny_verl_cpu", [*SPLIT, "optim.kl_coef=0.01", *LORA])
    vc = compose_verl_config(cfg, plan, plan.models[0], run_dir="/tmp/lora_ref")
    assert ModelGroup(plan.models[0], vc, plan.verl, tokenizer=None).role == "actor"


@pytest.mark.slow
def test_verl_lora_reference_log_probs_equal_the_base_models_after_an_update():
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "OMP_NUM_THREADS": "1",
    }
    r = subprocess.run(
        [sys.executable, __file__], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    print(out)
    assert out["role"] == "actor" and out["ref_in_actor"]
    assert out["ref_vs_base"] <= 1e-5, out  # the reference is the frozen base
    assert out["actor_vs_base"] > 100 * max(out["ref_vs_base"], 1e-7), out  # while the adapter moved the actor
    assert out["kl_metric"] > 0, out


def main() -> None:
    import socket

    from metaagent.train.verl_backend.cpu import activate

    activate("cpu")  # before anything else imports verl
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from metaagent.learn.samples import Sample
    from metaagent.policy.logsoftmax import log_softmax
    from metaagent.policy.models import resolve_model
    from metaagent.train.verl_backend.batch import build_update_batch

    path = resolve_model("tiny")
    tok = AutoTokenizer.from_pretrained(path)
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
    gen = torch.Generator().manual_seed(0)
    vocab = base.config.vocab_size
    samples = []
    for i, adv in enumerate([1.5, -0.5, 0.5, -1.5]):
        p = torch.randint(10, vocab, (8 + 3 * i,), generator=gen).tolist()
        r = torch.randint(10, vocab, (4 + i,), generator=gen).tolist()
        samples.append(Sample("executor", p, r, [], adv, 1.0, agent="a", key=(i,), task_id=f"t{i}"))
    with torch.no_grad():
        for s in samples:
            ids = torch.tensor([s.prompt_ids + s.response_ids])
            logits = base(input_ids=ids).logits.float()[0]
            n = len(s.response_ids)
            s.old_logprobs = log_softmax(logits[-n - 1 : -1]).gather(-1, ids[0, -n:, None]).squeeze(-1).tolist()

    cfg = TrainConfig.load(None, [
        f"policy.model={path}", "trainer.backend=verl", "trainer.steps=1", "optim.lr=0.05", "optim.kl_coef=0.01",
        "optim.max_prompt_tokens=64", "optim.max_response_tokens=32", "verl.device=cpu", *SPLIT, *LORA,
        "verl.gradient_checkpointing=false",
    ])  # fmt: skip
    plan = resolve_plan(cfg)
    mp = plan.models[0]
    verl_cfg = compose_verl_config(cfg, plan, mp, run_dir=str(Path(os.environ.get("TMPDIR", "/tmp")) / "lora_ref"))
    group = ModelGroup(mp, verl_cfg, plan.verl, tok, seed=0)
    worker = ActorRolloutRefWorker(config=verl_cfg.actor_rollout_ref, role=group.role)
    worker.init_model()
    group.wg, group.dp_size = worker, 1  # in-process: the worker's methods are called directly

    def batch():
        return build_update_batch(samples, dp_size=1, pad_id=tok.pad_token_id or 0, loss_agg_mode="token-mean")

    group.update(batch(), step=0)  # LoRA's B starts at 0: this step moves the adapter away from the base
    second = batch()
    metrics = group.update(second, step=1)  # reads ref_log_prob through the actor with the adapter off
    mask = second.data.batch["response_mask"].bool()
    rows = len(samples)
    want = torch.zeros_like(second.data.batch["ref_log_prob"])
    for i, s in enumerate(samples):
        want[i, : len(s.old_logprobs)] = torch.tensor(s.old_logprobs)  # the base's log-probs (computed above)
    probe = batch()
    group.reference_log_probs(probe)
    actor = group.actor_log_probs(probe)
    diff = lambda a: float(((a - want)[:rows].abs() * mask[:rows]).max())
    print(json.dumps({
        "role": group.role, "ref_in_actor": group.ref_in_actor,
        "ref_vs_base": diff(probe.data.batch["ref_log_prob"]), "actor_vs_base": diff(actor),
        "kl_metric": metrics.get("verl/policy/actor/kl_loss", 0.0),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
