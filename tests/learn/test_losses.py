"""PPO-clip loss (Eq. 2-3) through verl's functions: hand-checked values, global normalisation, KL, entropy."""

from __future__ import annotations

import math

import pytest
import torch

from metaagent.config import ConfigError
from metaagent.learn.losses import GlobalBatch, LossConfig, LossError, policy_loss


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
        (10.0, -1.0, 10.0, 0.0),  # A < 0, no dual clip (Eq. 2): -A * ratio, unbounded
    ],
)
def test_hand_checked_token_losses(ratio, adv, expected, clipped):
    loss, m = one_token(ratio, adv)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert m["train/pg_clipfrac"] == clipped
    assert m["train/ppo_kl"] == pytest.approx(-math.log(ratio), rel=1e-5)


def test_dual_clip_is_an_explicit_option():
    """verl's dual clip caps the loss of a negative advantage at -A * clip_ratio_c; Eq. 2 has no such cap."""
    loss, m = one_token(10.0, -1.0, LossConfig(dual_clip=True))
    assert float(loss) == pytest.approx(3.0, rel=1e-5) and m["train/pg_clipfrac_lower"] == 1.0
    loss, m = one_token(10.0, -1.0, LossConfig(dual_clip=True, clip_ratio_c=5.0))
    assert float(loss) == pytest.approx(5.0, rel=1e-5)
    loss, m = one_token(10.0, -1.0, LossConfig(dual_clip=False))
    assert float(loss) == pytest.approx(10.0, rel=1e-5) and m["train/pg_clipfrac_lower"] == 0.0


def test_policy_loss_is_a_name_in_verls_registry():
    """gspo uses the length-normalised sequence ratio: one shared ratio for every token of a trajectory."""
    old = torch.tensor([[-1.0, -1.0]])
    new = old + torch.tensor([[math.log(1.1), math.log(1.3)]])
    adv, mask = torch.tensor([[1.0, 1.0]]), torch.ones(1, 2)
    cfg = dict(loss_agg_mode="seq-mean-token-mean")
    vanilla, _ = policy_loss(new, old, adv, mask, config=LossConfig(**cfg), batch=GlobalBatch(2, 1))
    gspo, _ = policy_loss(new, old, adv, mask, config=LossConfig(policy_loss="gspo", **cfg), batch=GlobalBatch(2, 1))
    assert float(vanilla) == pytest.approx(-(1.1 + 1.2) / 2, rel=1e-5)  # 1.3 clipped at 1.2
    seq_ratio = math.sqrt(1.1 * 1.3)  # exp(mean log-ratio) = 1.1958 < 1.2: not clipped
    assert float(gspo) == pytest.approx(-seq_ratio, rel=1e-5)
    with pytest.raises(ConfigError, match="policy_loss = 'ppo2'"):
        LossConfig(policy_loss="ppo2")


def test_seq_mean_token_mean_weighs_every_trajectory_the_same():
    """Eq. 2's 1/|G| sum over trajectories: a 1-token and a 3-token trajectory count once each."""
    old = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    seq, _ = policy_loss(old.clone(), old, adv, mask, config=LossConfig(), batch=GlobalBatch(4, 2))
    tok, _ = policy_loss(old.clone(), old, adv, mask, config=LossConfig(loss_agg_mode="token-mean"), batch=GlobalBatch(4, 2))
    assert float(seq) == pytest.approx(0.0)  # (-1 + 1) / 2
    assert float(tok) == pytest.approx((-1 + 3) / 4)  # the long trajectory weighs 3x


def test_separate_clip_high():
    loss, _ = one_token(1.5, 1.0, LossConfig(clip_low=0.2, clip_high=0.28))
    assert float(loss) == pytest.approx(-1.28, rel=1e-6)
    loss, _ = one_token(0.5, -1.0, LossConfig(clip_low=0.1, clip_high=0.28))
    assert float(loss) == pytest.approx(0.9, rel=1e-6)


def test_token_mean_uses_the_global_token_count():
    lp = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    tm = LossConfig(loss_agg_mode="token-mean")
    local, _ = policy_loss(lp, lp, adv, mask, config=tm, batch=GlobalBatch(5, 2))
    assert float(local) == pytest.approx(-(3 - 4) / 5)
    share, _ = policy_loss(lp, lp, adv, mask, config=tm, batch=GlobalBatch(10, 4))
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
    with pytest.raises(ConfigError, match="clip_low = 1.5: Input should be less than 1"):
        LossConfig(clip_low=1.5)
    with pytest.raises(ConfigError, match="loss_agg_mode = 'mean': Input should be 'token-mean', "):
        LossConfig(loss_agg_mode="mean")
    with pytest.raises(ConfigError, match="kl_type = 'forward'"):
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


def test_role_advantage_scales_turn_one_aggregation_into_the_sum_of_role_losses():
    """verl takes one batch: scaling each role's advantages by total/size_r gives L_D + L_E exactly."""
    from metaagent.learn.losses import role_advantage_scales

    lp = torch.zeros(3, 2)
    old = torch.zeros(3, 2) - 0.1
    adv = torch.tensor([[1.0, 1.0], [-1.0, 0.0], [0.5, 0.5]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    roles = ["designer", "executor", "executor"]
    for mode in ("token-mean", "seq-mean-token-mean"):
        cfg = LossConfig(loss_agg_mode=mode)
        per_role = 0.0
        for role in ("designer", "executor"):
            rows = [i for i, r in enumerate(roles) if r == role]
            m = mask[rows]
            loss, _ = policy_loss(lp[rows], old[rows], adv[rows], m, config=cfg, batch=GlobalBatch(int(m.sum()), len(rows)))
            per_role += float(loss)
        scales = role_advantage_scales({"designer": (1, 2), "executor": (2, 3)}, mode)
        scaled = adv * torch.tensor([scales[r] for r in roles])[:, None]
        one, _ = policy_loss(lp, old, scaled, mask, config=cfg, batch=GlobalBatch(5, 3))
        assert float(one) == pytest.approx(per_role, rel=1e-6), mode
    assert role_advantage_scales({"executor": (4, 9)}, "token-mean") == {"executor": 1.0}


def test_dpo_loss_against_hand_computed_values():
    """Two pairs, beta 0.5: margins 0.5*((-1+2)-(-3+2)) = 1.0 and 0.5*((-2+2)-(-1+1)) = 0.0."""
    from metaagent.learn.losses import dpo_loss

    chosen, rejected = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0])
    ref_c, ref_r = torch.tensor([-2.0, -2.0]), torch.tensor([-2.0, -1.0])
    loss, m = dpo_loss(chosen, rejected, ref_c, ref_r, beta=0.5)
    expected = -(math.log(1 / (1 + math.exp(-1.0))) + math.log(0.5)) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert m["train/dpo_accuracy"] == 0.5 and m["train/dpo_margin"] == pytest.approx(0.5)
    weighted, _ = dpo_loss(chosen, rejected, ref_c, ref_r, beta=0.5, weights=torch.tensor([3.0, 1.0]))
    assert float(weighted) == pytest.approx(-(3 * math.log(1 / (1 + math.exp(-1.0))) + math.log(0.5)) / 2, rel=1e-6)
    with pytest.raises(LossError, match="beta"):
        dpo_loss(chosen, rejected, ref_c, ref_r, beta=0.0)
    with pytest.raises(LossError, match="weights"):
        dpo_loss(chosen, rejected, ref_c, ref_r, weights=torch.tensor([1.0, -1.0]))
