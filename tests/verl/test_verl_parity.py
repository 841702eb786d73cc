"""Parity: one batch updated once by the local backend (PolicyUpdater) and once by verl's real FSDP engine on CPU
(fp32, the same AdamW settings, the same loss) gives the same loss and the same updated log-probs.

The verl half runs verl's ``ActorRolloutRefWorker`` in-process through :class:`ModelGroup` (``update`` =
``update_actor``); verl's CPU platform patches are process-global, so this file runs itself as a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOSS_TOL = 1e-5  # |loss_local - loss_verl|
LOGPROB_TOL = 1e-5  # max |updated log-prob local - verl| over response tokens (measured ~2e-6)


@pytest.mark.slow
def test_local_and_verl_updates_agree_on_one_batch():
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
    assert out["before_max_diff"] <= 1e-5  # both start from the same pi_old
    assert abs(out["loss_local"] - out["loss_verl"]) <= LOSS_TOL, out
    assert out["after_max_diff"] <= LOGPROB_TOL, out
    assert out["moved"] > 10 * out["after_max_diff"], out  # the update itself is far larger than the gap


def main() -> None:
    import copy
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
    from metaagent.train.config import TrainConfig
    from metaagent.train.local.update import PolicyUpdater
    from metaagent.train.verl_backend.batch import build_update_batch
    from metaagent.train.verl_backend.plan import resolve_plan
    from metaagent.train.verl_backend.verl_config import compose_verl_config
    from metaagent.train.verl_backend.workers import ModelGroup

    path = os.environ.get("PARITY_MODEL") or resolve_model("tiny")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()

    def logprobs(m, samples) -> list[torch.Tensor]:
        out = []
        with torch.no_grad():
            for s in samples:
                ids = torch.tensor([s.prompt_ids + s.response_ids])
                logits = m(input_ids=ids).logits.float()[0]
                r = len(s.response_ids)
                out.append(log_softmax(logits[-r - 1 : -1]).gather(-1, ids[0, -r:, None]).squeeze(-1))
        return out

    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    samples = []
    for i, adv in enumerate([1.5, -0.5, 0.5, -1.5, 1.0, 0.3]):
        p = torch.randint(10, vocab, (8 + 3 * i,), generator=gen).tolist()
        r = torch.randint(10, vocab, (4 + i,), generator=gen).tolist()
        samples.append(Sample("executor", p, r, [], adv, 1.0, agent="a", key=(i,), task_id=f"t{i}"))
    for s, lp in zip(samples, logprobs(model, samples)):
        s.old_logprobs = lp.tolist()  # pi_old = the current policy, as right after a rollout

    lr, agg = 1e-3, "seq-mean-token-mean"
    local = copy.deepcopy(model).train()
    updater = PolicyUpdater(local, lr=lr, weight_decay=0.01, grad_clip=1.0, loss_agg_mode=agg, compute_entropy=False)
    m_local = updater.update(samples)
    after_local = logprobs(local.eval(), samples)

    cfg = TrainConfig.load(None, [
        f"policy.model={path}", "trainer.backend=verl", "trainer.steps=1", f"optim.lr={lr}",
        "optim.weight_decay=0.01", "optim.grad_clip=1.0", f"optim.loss_agg_mode={agg}",
        "optim.max_prompt_tokens=64", "optim.max_response_tokens=32", "verl.device=cpu",
        "verl.n_gpus_per_node=2", "verl.models={policy: {gpus: 1, rollout_gpus: 1}}",  # split: role actor
        "verl.gradient_checkpointing=false", "verl.logprob_check=true",
    ])  # fmt: skip
    plan = resolve_plan(cfg)
    mp = plan.models[0]
    verl_cfg = compose_verl_config(cfg, plan, mp, run_dir=str(Path(os.environ.get("TMPDIR", "/tmp")) / "parity"))
    group = ModelGroup(mp, verl_cfg, plan.verl, tok, seed=0)
    worker = ActorRolloutRefWorker(config=verl_cfg.actor_rollout_ref, role=group.role)
    worker.init_model()
    group.wg, group.dp_size = worker, 1  # in-process: the worker's methods are called directly

    batch = build_update_batch(samples, dp_size=1, pad_id=group.pad_id, loss_agg_mode=agg)
    mask = batch.data.batch["response_mask"].bool()
    m_verl = group.update(batch, step=0)
    after_verl = group.actor_log_probs(batch)
    # the batch's rows are in the samples' order (balancing reorders nothing with one rank)
    after_local_t = torch.zeros_like(after_verl)
    before = torch.zeros_like(after_verl)
    for i, (lp, s) in enumerate(zip(after_local, samples)):
        after_local_t[i, : len(lp)] = lp
        before[i, : len(lp)] = torch.tensor(s.old_logprobs)
    assert torch.equal(batch.data.batch["responses"][: len(samples)][mask[: len(samples)]],
                       torch.tensor([t for s in samples for t in s.response_ids]))  # fmt: skip
    n = len(samples)
    print(json.dumps({
        "before_max_diff": m_verl["verl/policy/rollout_logprob_diff_max"],
        "loss_local": m_local["train/loss"],
        "loss_verl": m_verl["verl/policy/actor/pg_loss"],
        "after_max_diff": float(((after_local_t - after_verl)[:n].abs() * mask[:n]).max()),
        "moved": float(((after_verl - before)[:n].abs() * mask[:n]).max()),
        "grad_norm_local": m_local.get("train/grad_norm"),
        "grad_norm_verl": m_verl.get("verl/policy/actor/grad_norm"),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
