"""UnityMAS-O's GAE on the verl backend, with verl's real critic worker group on CPU (``verl.device=cpu``).

One step of the reflective code loop (``unity_code``) on the tiny model, ``algo.options.mode=gae``: verl's value
model (a ``TrainingWorker`` colocated with the actor) gives V_t, metaagent's one GAE formula gives the advantages,
``update_critic`` takes one step of verl's clipped value loss, then ``update_actor``. The driver
(``gae_cpu_driver.py``, a subprocess: verl's CPU patches are process-global) records what went to the workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

RUN = [
    "policy.model=tiny", "rollout.executor.max_tokens=8", "rollout.n_executions=2", "data.batch_size=1",
    "algo.options={mode: gae, gamma: 1.0, lam: 1.0}", "critic.lr=1e-3", "trainer.steps=1", "trainer.save_every=1",
    "trainer.backend=verl", "verl.device=cpu", "verl.n_gpus_per_node=1",
]  # fmt: skip
TOL = 1e-5  # fp32: the same value model forwarded by verl's FSDP engine (packed) and by transformers (padded)


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("verl_gae")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "OMP_NUM_THREADS": "1",
    }
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "verl" / "gae_cpu_driver.py"), str(out), *RUN],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return json.loads((out / "probe.json").read_text()), out / "run"


def critic_shard(ckpt: Path, like: str):
    """The fp32 value model of a one-worker verl critic checkpoint, as the local backend's critic builds it."""
    from metaagent.train.local.critic import load_value_model

    shard = torch.load(ckpt / "critics" / "policy" / "model_world_size_1_rank_0.pt", weights_only=False, map_location="cpu")
    state = {k: (v._local_tensor if hasattr(v, "_local_tensor") else v).float() for k, v in shard.items()}
    model = load_value_model(like)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    return model.eval()


def test_verl_critic_values_are_the_local_critics_on_the_same_weights(probe):
    from metaagent.learn.optim import OptimizerConfig
    from metaagent.learn.samples import Sample
    from metaagent.policy.models import resolve_model
    from metaagent.train.local.critic import Critic

    data, run = probe
    samples = data["samples"]
    assert len(samples) == 16  # 2 executions x (planner, coder, reflector per round...) all rewarded
    local = Critic(critic_shard(run / "checkpoints" / "step_00000000", resolve_model("tiny")), optim=OptimizerConfig())
    got = local.values([Sample("executor", s["prompt_ids"], s["response_ids"], [0.0] * len(s["response_ids"]), 0.0, 1.0, "x") for s in samples])
    worst = max(float(np.abs(np.subtract(g, s["values"])).max()) for g, s in zip(got, samples))
    assert worst <= TOL  # verl reads V_t where the local critic does: the hidden state before token t
    assert len({round(v, 6) for s in samples for v in s["values"]}) > 10  # a real value model, not constants


def test_advantages_are_metaagents_gae_and_equal_verls_compute_gae_advantage_return(probe):
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return

    from metaagent.credit.unity import gae_advantages, last_token_rewards, whiten_tokens

    data, _ = probe
    samples = data["samples"]
    raw = [gae_advantages(last_token_rewards(s["reward"], len(s["values"])), s["values"]) for s in samples]
    for (adv, ret), s in zip(raw, samples):
        assert adv == pytest.approx(s["reward"] - np.asarray(s["values"]), abs=1e-6)  # gamma = lam = 1: r - V_t
        assert s["returns"] == pytest.approx(ret.tolist(), abs=1e-6)
    ours = whiten_tokens([a for a, _ in raw])  # one model: whitened over all its response tokens
    for w, s in zip(ours, samples):
        assert s["token_advantages"] == pytest.approx(w.tolist(), abs=1e-6)
    # verl's estimator on the same padded batch (rewards on the last token, right padding masked)
    r = max(len(s["values"]) for s in samples)
    rewards, values, mask = (torch.zeros(len(samples), r, dtype=torch.float64) for _ in range(3))
    for i, s in enumerate(samples):
        n = len(s["values"])
        rewards[i, n - 1], values[i, :n], mask[i, :n] = s["reward"], torch.tensor(s["values"]), 1.0
    adv, ret = compute_gae_advantage_return(rewards, values, mask, gamma=1.0, lam=1.0)
    for i, s in enumerate(samples):
        n = len(s["values"])
        assert adv[i, :n].tolist() == pytest.approx(s["token_advantages"], abs=1e-5)
        assert ret[i, :n].tolist() == pytest.approx(s["returns"], abs=1e-6)
    # and what the workers got: the critic the values and returns, the actor the token advantages
    by_key = {s["key"]: s for s in samples}
    assert sorted(row["key"] for row in data["critic_batch"]) == sorted(by_key)
    for row in data["critic_batch"]:
        s, n = by_key[row["key"]], len(by_key[row["key"]]["values"])
        assert row["values"][:n] == pytest.approx(s["values"], abs=1e-6)
        assert row["returns"][:n] == pytest.approx(s["returns"], abs=1e-6)
        assert sum(row["response_mask"]) == n
    for row in data["actor_batch"]:
        s = by_key[row["key"]]
        assert row["advantages"][: len(s["values"])] == pytest.approx(s["token_advantages"], abs=1e-6)


def test_update_critic_takes_one_value_loss_step_towards_the_returns_and_the_checkpoints_restore_it(probe):
    data, run = probe
    metrics = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    samples = data["samples"]
    errors = np.concatenate([np.subtract(s["values"], s["returns"]) for s in samples])
    # the first (only) mini-batch: V_theta = V_old, nothing clipped, loss = 1/2 mean_t (V_t - R_t)^2 (token-mean)
    assert metrics["train/critic/vf_loss"] == pytest.approx(0.5 * float((errors**2).mean()), rel=1e-4)
    assert metrics["train/critic/vf_clipfrac"] == 0.0
    assert metrics["train/critic/skipped_step"] == 0.0 and metrics["train/critic/grad_norm"] > 0
    assert metrics["train/critic/samples"] == len(samples)
    assert metrics["verl/policy/skipped_step"] == 0.0  # the actor trained on the GAE advantages
    assert metrics["credit/values_mean"] == pytest.approx(np.mean(np.concatenate([s["values"] for s in samples])), abs=1e-6)

    def dist(values):  # mean |V - R| over the samples' tokens
        return float(np.mean(np.abs(np.concatenate([np.subtract(values[s["key"]], s["returns"]) for s in samples]))))

    before = {s["key"]: s["values"] for s in samples}
    assert dist(data["values_after"]) < dist(before)  # one step moved V towards R
    for key, v in before.items():  # the step-0 checkpoint brings the initial critic back, step 1 the updated one
        assert data["values_step0"][key] == pytest.approx(v, abs=1e-6)
        assert data["values_step1"][key] == pytest.approx(data["values_after"][key], abs=1e-6)
    meta = json.loads((run / "checkpoints" / "step_00000001" / "meta.json").read_text())
    assert meta["critics"] == {"policy": "critics/policy"}
