"""Rollout-training mismatch correction (``optim.tis_cap``) on the verl backend, on CPU: the composed verl config,
the ``rollout_is_weights`` that go into the DataProto, verl's actor loss using them, and the metric names.

The end-to-end CPU step (verl's FSDP engine in a Ray CPU worker) is ``test_verl_tis_cpu.py`` (slow)."""

from __future__ import annotations

import math

import pytest
import torch
from builders import PAD, samples_of
from omegaconf import OmegaConf

from metaagent.config import ConfigError
from metaagent.learn.losses import GlobalBatch, LossConfig, policy_loss, tis_metrics, tis_weights
from metaagent.learn.samples import Sample
from metaagent.train.config import TrainConfig
from metaagent.train.verl_backend.batch import add_rollout_correction, build_update_batch, update_tensordict
from metaagent.train.verl_backend.errors import VerlBackendError
from metaagent.train.verl_backend.plan import resolve_plan
from metaagent.train.verl_backend.verl_config import compose_verl_config

RC = "algorithm.rollout_correction"


def plan_and_config(*overrides: str):
    cfg = TrainConfig.load("tiny", ["trainer.backend=verl", "verl.n_gpus_per_node=1", *overrides])
    plan = resolve_plan(cfg)
    return cfg, plan, compose_verl_config(cfg, plan, plan.models[0])


def test_tis_cap_maps_to_verls_rollout_correction_and_recomputes_pi_old():
    _, plan, vc = plan_and_config("optim.tis_cap=1.5", "optim.tis_level=sequence")
    assert OmegaConf.select(vc, f"{RC}.rollout_is") == "sequence"
    assert OmegaConf.select(vc, f"{RC}.rollout_is_threshold") == 1.5
    assert OmegaConf.select(vc, f"{RC}.bypass_mode") is False  # decoupled: pi_rollout, pi_old, pi_theta
    assert plan.verl.old_log_prob == "recompute"  # implied by tis_cap
    _, plan, vc = plan_and_config("optim.tis_cap=2.0")
    assert OmegaConf.select(vc, f"{RC}.rollout_is") == "token"
    # off by default: verl's default (no IS weights) and pi_old = the rollout's log-probs
    _, plan, vc = plan_and_config()
    assert OmegaConf.select(vc, f"{RC}.rollout_is") is None and plan.verl.old_log_prob == "rollout"
    _, plan, _ = plan_and_config("optim.tis_cap=2.0", "verl.old_log_prob=recompute")
    assert plan.verl.old_log_prob == "recompute"
    with pytest.raises(ConfigError, match="needs verl.old_log_prob=recompute"):
        plan_and_config("optim.tis_cap=2.0", "verl.old_log_prob=rollout")


def _batch(trees, deltas, dp_size=3):
    """A mixed designer/executor batch with DP padding rows, pi_old recomputed as rollout + delta (by hand)."""
    samples = samples_of(trees)
    batch = build_update_batch(samples, dp_size=dp_size, pad_id=PAD)
    d = batch.data.batch
    mask = d["response_mask"].float()
    d["rollout_log_probs"] = d["old_log_probs"].clone()
    d["old_log_probs"] = (d["rollout_log_probs"] + deltas(mask.shape)) * mask
    return batch


def _deltas(shape):
    g = torch.Generator().manual_seed(0)
    return torch.empty(shape).uniform_(-0.6, 0.6, generator=g)  # some token ratios above 1.3, some below


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_rollout_is_weights_in_the_dataproto_are_the_truncated_ratios(trees, level):
    cap = 1.3
    _, _, vc = plan_and_config(f"optim.tis_cap={cap}", f"optim.tis_level={level}")
    batch = _batch(trees, _deltas)
    assert batch.pad_rows > 0  # the padding rows must stay at weight 0
    d = batch.data.batch
    metrics = add_rollout_correction(batch, vc.algorithm.rollout_correction)
    w = d["rollout_is_weights"]  # (B, R)
    pad = torch.as_tensor(batch.data.non_tensor_batch["is_padding"])
    for i in range(len(batch.data)):
        mask = d["response_mask"][i].bool()
        delta = (d["old_log_probs"][i] - d["rollout_log_probs"][i]).double()
        if pad[i]:
            assert not mask.any() and (w[i] == 0).all()
            continue
        if level == "token":
            expected = [min(math.exp(x), cap) for x in delta[mask].tolist()]
        else:  # one weight per response: the product of its token ratios, truncated
            expected = [min(math.exp(float(delta[mask].sum())), cap)] * int(mask.sum())
        assert w[i][mask].tolist() == pytest.approx(expected, rel=1e-5)
        assert (w[i][~mask] == 0).all()
    assert (w == cap).any() and ((w > 0) & (w < cap)).any()  # the cap bites somewhere, not everywhere
    # verl's metrics, over the real rows; the local backend's names and values from the same log-probs
    real = ~pad
    local_w, local_m = tis_weights(
        d["old_log_probs"][real],
        d["rollout_log_probs"][real],
        d["response_mask"][real].float(),
        cap=cap,
        level=level,
    )
    assert torch.allclose(w[real], local_w, atol=1e-6)
    mapped = tis_metrics(metrics, level, prefix="rollout_corr/")
    assert mapped == pytest.approx(local_m, rel=1e-5, abs=1e-7)
    # the weights travel to update_actor with the batch
    td = update_tensordict(batch)
    assert torch.equal(td["rollout_is_weights"], w)


def test_tis_metric_keys_are_the_local_backends():
    train = torch.tensor([[-1.0, -2.0]])
    rollout = torch.tensor([[-1.5, -1.0]])
    mask = torch.ones(1, 2)
    _, m = policy_loss(
        train, rollout, torch.ones(1, 2), mask, config=LossConfig(tis_cap=1.5), batch=GlobalBatch(1, 2)
    )
    local = {k for k in m if k.startswith(("train/tis_", "train/mismatch_"))}
    _, _, vc = plan_and_config("optim.tis_cap=1.5")
    samples = [Sample("executor", [5, 6], [7, 8], rollout[0].tolist(), 1.0, 1.0, key=(0, 0, 0, 0))]
    batch = build_update_batch(samples, dp_size=1, pad_id=PAD)
    batch.data.batch["rollout_log_probs"] = rollout.clone()
    batch.data.batch["old_log_probs"] = train.clone()
    verl_metrics = add_rollout_correction(batch, vc.algorithm.rollout_correction)
    assert set(tis_metrics(verl_metrics, "token", "rollout_corr/")) == local == {
        "train/tis_clipfrac", "train/tis_weight_mean", "train/mismatch_kl", "train/mismatch_k3_kl",
    }  # fmt: skip
    assert tis_metrics(verl_metrics, "token", "rollout_corr/") == pytest.approx({k: m[k] for k in local})


def test_add_rollout_correction_needs_recomputed_pi_old_and_refuses_bypass(trees):
    _, _, vc = plan_and_config("optim.tis_cap=2.0")
    batch = build_update_batch(samples_of(trees), dp_size=1, pad_id=PAD)
    with pytest.raises(VerlBackendError, match="recompute"):
        add_rollout_correction(batch, vc.algorithm.rollout_correction)
    _, _, vc = plan_and_config("optim.tis_cap=2.0", f"verl.overrides=[{RC}.bypass_mode=true]")
    batch = _batch(trees, _deltas)
    with pytest.raises(VerlBackendError, match="bypass_mode"):
        add_rollout_correction(batch, vc.algorithm.rollout_correction)


def test_verls_actor_loss_multiplies_the_weights_into_each_tokens_gradient(trees):
    """verl's ``ppo_loss`` (what ``update_actor`` runs per micro-batch) on the update TensorDict: at ratio 1 the
    policy-gradient term is linear in the weight, so d loss / d log-prob with the weights = weight x without."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.utils.losses import ppo_loss

    cap = 1.3
    _, _, vc = plan_and_config(f"optim.tis_cap={cap}")
    batch = _batch(trees, _deltas, dp_size=1)
    add_rollout_correction(batch, vc.algorithm.rollout_correction)
    d = batch.data.batch

    def grads(with_weights: bool) -> torch.Tensor:
        td = update_tensordict(batch)
        if not with_weights:
            del td["rollout_is_weights"]
        tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=int(d["response_mask"].sum()))
        # the model's per-position log-probs, packed as verl's engine returns them: response token j of a row
        # sits at position (prompt length - 1 + j) of its sequence; set to pi_old there (ratio 1)
        lens = d["attention_mask"].sum(-1)
        values = torch.zeros(int(lens.sum()))
        p = d["prompts"].shape[1]
        start = 0
        for i in range(len(batch.data)):
            lp = int(d["attention_mask"][i, :p].sum())
            lr = int(d["response_mask"][i].sum())
            values[start + lp - 1 : start + lp - 1 + lr] = d["old_log_probs"][i, :lr]
            start += int(lens[i])
        values.requires_grad_(True)
        nested = torch.nested.nested_tensor_from_jagged(values, offsets=td["input_ids"].offsets())
        actor = omega_conf_to_dataclass(vc.actor_rollout_ref.actor)
        loss, _ = ppo_loss(actor, {"log_probs": nested}, td)
        (g,) = torch.autograd.grad(loss, values)
        return g

    from verl.workers.utils.padding import no_padding_2_padding

    td = update_tensordict(batch)
    with_w = no_padding_2_padding(grads(True), td)  # (B, R)
    without = no_padding_2_padding(grads(False), td)
    mask = d["response_mask"].bool()
    assert (without[mask] != 0).any()
    assert torch.allclose(with_w[mask], (d["rollout_is_weights"] * without)[mask], rtol=1e-5, atol=1e-9)
    assert not torch.allclose(with_w[mask], without[mask])
