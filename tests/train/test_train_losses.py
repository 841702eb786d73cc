"""PPO-clip loss (Eq. 2-3) through verl's functions: hand-checked values, global normalisation, KL, entropy."""

from __future__ import annotations

import math

import pytest
import torch

from metaagent.train.losses import GlobalBatch, LossConfig, LossError, policy_loss


def one_token(ratio: float, adv: float, cfg: LossConfig | None = None):
    old = torch.tensor([[-1.0]])
    new = old + math.log(ratio)
    return policy_loss(
        new, old, torch.tensor([[adv]]), torch.ones(1, 1), config=cfg or LossConfig(), batch=GlobalBatch(1, 1)
    )


@pytest.mark.parametrize(
    "ratio, adv, expected, clipped",
    [
        (1.0, 1.0, -1.0, 0.0),  # on-policy: loss = -A
        (1.5, 1.0, -1.2, 1.0),  # A > 0: ratio clipped at 1 + 0.2
        (0.5, 1.0, -0.5, 0.0),  # A > 0, ratio below 1 - eps: min picks the unclipped term
        (0.5, -1.0, 0.8, 1.0),  # A < 0: ratio clipped at 1 - 0.2
        (10.0, -1.0, 3.0, 0.0),  # dual clip: at most -A * clip_ratio_c
    ],
)
def test_hand_checked_token_losses(ratio, adv, expected, clipped):
    loss, m = one_token(ratio, adv)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert m["train/pg_clipfrac"] == clipped
    assert m["train/ppo_kl"] == pytest.approx(-math.log(ratio), rel=1e-5)


def test_separate_clip_high():
    loss, _ = one_token(1.5, 1.0, LossConfig(clip_low=0.2, clip_high=0.28))
    assert float(loss) == pytest.approx(-1.28, rel=1e-6)
    loss, _ = one_token(0.5, -1.0, LossConfig(clip_low=0.1, clip_high=0.28))
    assert float(loss) == pytest.approx(0.9, rel=1e-6)


def test_token_mean_uses_the_global_token_count():
    lp = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    local, _ = policy_loss(lp, lp, adv, mask, config=LossConfig(), batch=GlobalBatch(5, 2))
    assert float(local) == pytest.approx(-(3 - 4) / 5)
    share, _ = policy_loss(lp, lp, adv, mask, config=LossConfig(), batch=GlobalBatch(10, 4))
    assert float(share) == pytest.approx(float(local) / 2)
    seq, _ = policy_loss(
        lp, lp, adv, mask, config=LossConfig(loss_agg_mode="seq-mean-token-mean"), batch=GlobalBatch(5, 2)
    )
    assert float(seq) == pytest.approx(-(1 - 2) / 2)


def test_kl_and_entropy_terms():
    lp = torch.full((1, 2), -1.0, requires_grad=True)
    mask = torch.ones(1, 2)
    cfg = LossConfig(kl_coef=0.5, kl_type="low_var_kl", entropy_coef=0.1)
    entropy = torch.full((1, 2), 2.0, requires_grad=True)
    ref = torch.full((1, 2), -1.5)
    loss, m = policy_loss(
        lp,
        lp.detach(),
        torch.zeros(1, 2),
        mask,
        config=cfg,
        batch=GlobalBatch(2, 1),
        ref_log_probs=ref,
        entropy=entropy,
    )
    k3 = math.exp(-0.5) - (-0.5) - 1  # low_var_kl of logp - ref = 0.5
    assert m["train/kl_loss"] == pytest.approx(k3, rel=1e-5) and m["train/ref_kl"] == pytest.approx(
        k3, rel=1e-5
    )
    assert m["train/entropy"] == pytest.approx(2.0) and m["train/entropy_loss"] == pytest.approx(2.0)
    assert float(loss.detach()) == pytest.approx(0.5 * k3 - 0.1 * 2.0, rel=1e-5)
    loss.backward()
    assert entropy.grad is not None and float(entropy.grad.sum()) == pytest.approx(-0.1)


def test_misconfiguration_is_refused():
    with pytest.raises(LossError, match="clip_low"):
        LossConfig(clip_low=1.5)
    with pytest.raises(LossError, match="loss_agg_mode"):
        LossConfig(loss_agg_mode="mean")
    with pytest.raises(LossError, match="kl_type"):
        LossConfig(kl_type="forward")
    lp = torch.zeros(1, 2)
    with pytest.raises(LossError, match="ref_log_probs"):
        policy_loss(lp, lp, lp, torch.ones(1, 2), config=LossConfig(kl_coef=0.1), batch=GlobalBatch(2, 1))
    with pytest.raises(LossError, match="shape"):
        policy_loss(lp, torch.zeros(1, 3), lp, torch.ones(1, 2), config=LossConfig(), batch=GlobalBatch(2, 1))
    with pytest.raises(LossError, match="differentiable"):
        policy_loss(
            lp,
            lp,
            lp,
            torch.ones(1, 2),
            config=LossConfig(entropy_coef=0.1),
            batch=GlobalBatch(2, 1),
            entropy=torch.ones(1, 2),
        )
