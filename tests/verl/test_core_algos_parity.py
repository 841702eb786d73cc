"""The ported loss functions (metaagent.learn.core_algos) equal verl 0.9.1's own: values, metrics, gradients.

Random (B, R) tensors with ragged response masks (one row fully masked), every registered policy loss under
every aggregation mode, with and without importance weights; every KL estimator; the value loss; the
truncated importance weights and mismatch metrics. Skipped where verl is not installed.
"""

from __future__ import annotations

import pytest
import torch

from metaagent.learn import core_algos
from metaagent.learn.optim import KL_TYPES, LOSS_AGG_MODES, POLICY_LOSSES

pytest.importorskip("verl")
pytest.importorskip("ray")  # every verl import pulls ray (verl/__init__ -> verl.protocol)

B, R = 6, 9


def batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, R, generator=g, dtype=torch.float64) * 3  # log-probs in (-3, 0]
    new = (old + 0.4 * torch.randn(B, R, generator=g, dtype=torch.float64)).clamp(max=-1e-3)
    adv = torch.randn(B, 1, generator=g, dtype=torch.float64).expand(B, R).clone()
    adv[1] = torch.randn(R, generator=g, dtype=torch.float64)  # one row of per-token advantages
    old[3, :4], new[3, :4], adv[3] = -2.5, -0.5, -1.0  # ratio e^2 > clip_ratio_c with A < 0: the dual clip acts
    lengths = torch.tensor([9, 5, 1, 7, 0, 3])
    mask = (torch.arange(R)[None, :] < lengths[:, None]).to(torch.float64)
    weights = (torch.rand(B, R, generator=g, dtype=torch.float64) * 2).clamp(max=1.5) * mask
    return old, new, adv, mask, weights


def run(fn, config, old, new, adv, mask, loss_agg_mode, weights, seed=0):
    logp = new.clone().requires_grad_(True)
    torch.manual_seed(seed)  # clip_cov draws its clipped tokens from torch's global RNG
    loss, metrics = fn(old, logp, adv, mask, loss_agg_mode, config, rollout_is_weights=weights)
    loss.backward()
    return loss.detach(), metrics, logp.grad


@pytest.mark.parametrize("name", POLICY_LOSSES)
def test_every_policy_loss_equals_verls(name):
    from verl.trainer.ppo import core_algos as verl_algos

    assert set(POLICY_LOSSES) <= set(verl_algos.POLICY_LOSS_REGISTRY)
    assert set(core_algos.POLICY_LOSS_REGISTRY) == set(POLICY_LOSSES)
    # cov ratios large enough that clip_cov / kl_cov touch tokens; dual clip on; DRO needs a beta
    settings = core_algos.LossSettings(
        clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, batch_num_tokens=25, global_batch_size=5,
        loss_scale_factor=7, clip_cov_ratio=0.2, clip_cov_lb=-1.0, kl_cov_ratio=0.2, dro_beta=0.05,
    )  # fmt: skip
    old, new, adv, mask, w = batch()
    for mode in LOSS_AGG_MODES:
        for weights in (None, w):
            ours = run(core_algos.get_policy_loss_fn(name), settings, old, new, adv, mask, mode, weights)
            theirs = run(verl_algos.get_policy_loss_fn(name), settings.verl_actor_config(mode), old, new, adv, mask, mode, weights)
            where = f"{name} {mode} weights={weights is not None}"
            torch.testing.assert_close(ours[0], theirs[0], rtol=1e-12, atol=1e-12, msg=where)
            torch.testing.assert_close(ours[2], theirs[2], rtol=1e-12, atol=1e-12, msg=where)
            expected = {k.removeprefix("actor/"): v for k, v in theirs[1].items()}
            assert ours[1] == pytest.approx(expected, rel=1e-12, abs=1e-12), where
            assert ours[2].abs().sum() > 0, where  # the gradient reaches the log-probs


def test_the_refusals_are_verls():
    old, new, adv, mask, _ = batch()
    with pytest.raises(ValueError, match="dro_beta"):
        core_algos.get_policy_loss_fn("dro")(old, new, adv, mask, "token-mean", core_algos.LossSettings())
    with pytest.raises(ValueError, match="Unsupported loss mode"):
        core_algos.get_policy_loss_fn("bypass_mode")
    with pytest.raises(ValueError, match="Invalid loss_agg_mode"):
        core_algos.agg_loss(new, mask, "token-median")


@pytest.mark.parametrize("kl_type", KL_TYPES)
def test_every_kl_estimator_equals_verls(kl_type):
    from verl.trainer.ppo import core_algos as verl_algos

    old, new, _, _, _ = batch(1)
    results = []
    for fn in (core_algos.kl_penalty, verl_algos.kl_penalty):
        logp = new.clone().requires_grad_(True)
        kl = fn(logp, old, kl_type)
        kl.sum().backward()
        results.append((kl.detach(), logp.grad))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=0, atol=0)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=0, atol=0)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_value_loss_equals_verls(mode):
    from verl.trainer.ppo import core_algos as verl_algos

    old, new, adv, mask, _ = batch(2)
    values, returns = old, old + adv
    results = []
    for fn in (core_algos.compute_value_loss, verl_algos.compute_value_loss):
        v = new.clone().requires_grad_(True)
        loss, clipfrac = fn(v, returns, values, mask, 0.3, mode, 1, 25, 5, None)
        loss.backward()
        results.append((loss.detach(), clipfrac, v.grad))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("cap", [0.5, 1.2, 4.0])
def test_importance_weights_and_mismatch_metrics_equal_verls(level, cap):
    from verl.trainer.ppo import rollout_corr_helper as helper

    old, new, _, mask, _ = batch(3)
    ours, m = core_algos.rollout_is_weights(new - old, mask, level, cap)
    theirs, vm = helper.compute_rollout_correction_weights(
        log_ratio=new - old, response_mask=mask, rollout_is=level, rollout_is_threshold=cap
    )
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    assert m == pytest.approx({k: vm[k] for k in m}, rel=1e-12, abs=1e-12)
    off = helper.compute_offpolicy_metrics(old_log_prob=new, rollout_log_prob=old, response_mask=mask)
    mine = core_algos.mismatch_kl(new, old, mask)
    assert mine == pytest.approx({k: off[k] for k in mine}, rel=1e-12, abs=1e-12)
    assert 0 < m["rollout_is_mean"] and mine["k3_kl"] > 0
