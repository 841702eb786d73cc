"""The pure loss functions of verl 0.9.1 that the local backend computes with, ported so that the local
training path imports neither verl nor Ray (``verl/__init__.py`` imports ``verl.protocol``, which imports
``ray`` at module level, so no ``verl.*`` module can be imported without Ray).

Ported from ``verl/trainer/ppo/core_algos.py`` (the policy-loss registry, ``agg_loss``, ``kl_penalty``,
``compute_value_loss``) and ``verl/trainer/ppo/rollout_corr_helper.py`` (truncated importance weights and the
mismatch metrics the trainer logs), formula for formula. ``tests/verl/test_core_algos_parity.py`` checks every
function here against verl's own on random tensors (losses, metrics and gradients) whenever verl is
importable; the verl backend keeps calling verl itself, and ``tests/verl/test_verl_loss.py`` checks that its
update equals the local one.

Shapes: ``(B, R)`` is (responses, response tokens); every loss returns a scalar and its metrics (plain
names; :mod:`metaagent.learn.losses` maps them to ``train/...``). Where verl reads its ``ActorConfig`` these
functions read :class:`LossSettings`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from metaagent.learn.optim import POLICY_LOSS_GROUP
from metaagent.registry import Registry

#: verl's clamp of log-ratios before ``exp`` in the rollout-correction helpers
SAFETY_BOUND = 20.0


@dataclass(frozen=True)
class LossSettings:
    """What verl's loss functions read from its ``ActorConfig`` (same names, verl 0.9.1's defaults).

    ``batch_num_tokens`` / ``global_batch_size`` / ``loss_scale_factor`` / ``dp_size`` are verl's
    ``global_batch_info``: the whole training batch, so micro-batch losses add up to the batch loss.
    """

    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0  # dual-clip bound (vanilla); truncation of the ratio (dppo_*)
    dp_size: int = 1
    batch_num_tokens: int | None = None
    global_batch_size: int | None = None
    loss_scale_factor: int | None = None
    tau_pos: float = 1.0  # SAPO gate temperatures
    tau_neg: float = 1.05
    clip_cov_ratio: float = 0.0002  # Clip-Cov / KL-Cov (verl's policy_loss section)
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1
    dro_beta: float | None = None

    @property
    def global_batch_info(self) -> dict[str, Any]:
        return {
            "dp_size": self.dp_size,
            "batch_num_tokens": self.batch_num_tokens,
            "global_batch_size": self.global_batch_size,
            "loss_scale_factor": self.loss_scale_factor,
        }

    def verl_actor_config(self, loss_agg_mode: str) -> Any:
        """verl's own ``ActorConfig`` with these settings, for verl's loss functions (the parity tests). Imports
        verl, and so Ray."""
        from verl.workers.config import ActorConfig, PolicyLossConfig

        return ActorConfig(
            strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, use_torch_compile=False,  # required, unused
            clip_ratio=self.clip_ratio_low, clip_ratio_low=self.clip_ratio_low, clip_ratio_high=self.clip_ratio_high,
            clip_ratio_c=self.clip_ratio_c, loss_agg_mode=loss_agg_mode, global_batch_info=self.global_batch_info,
            tau_pos=self.tau_pos, tau_neg=self.tau_neg,
            policy_loss=PolicyLossConfig(
                clip_cov_ratio=self.clip_cov_ratio, clip_cov_lb=self.clip_cov_lb, clip_cov_ub=self.clip_cov_ub,
                kl_cov_ratio=self.kl_cov_ratio, ppo_kl_coef=self.ppo_kl_coef, dro_beta=self.dro_beta,
            ),
        )  # fmt: skip


# ---- masked reductions (verl.utils.torch_functional) -------------------------------------------------------


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """``sum(values * mask)``; values outside the mask (NaN included) never reach the sum."""
    return (torch.where(mask.bool(), values, 0.0) * mask).sum(axis=axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    return masked_sum(values, mask, axis) / (mask.sum(axis=axis) + 1e-8)


# ---- aggregation ---------------------------------------------------------------------------------------------


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: int | None = None,
    global_batch_size: int | None = None,
    loss_scale_factor: int | None = None,
) -> torch.Tensor:
    """A (B, R) loss matrix to the micro-batch's share of the whole batch's loss::

        token-mean:               sum_{i,t} m_it l_it / N_tokens
        token-sum:                sum_{i,t} m_it l_it
        seq-mean-token-sum:       sum_i [sum_t m_it l_it] / N_seqs
        seq-mean-token-sum-norm:  the same / loss_scale_factor (default R)
        seq-mean-token-mean:      sum_i [sum_t m_it l_it / sum_t m_it] / N_seqs

    each times ``dp_size`` (data-parallel ranks average their gradients). ``N_tokens`` / ``N_seqs`` default to
    this micro-batch's own (one rank only).
    """
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            if dp_size > 1:
                raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
            batch_num_tokens = loss_mask.sum()
        return masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask) * dp_size
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)  # (B,)
        seq_mask = (torch.sum(loss_mask, dim=-1) > 0).float()  # fully masked rows do not count
        if global_batch_size is None:
            if dp_size > 1:
                raise ValueError("global_batch_size is required when dp_size > 1")
            global_batch_size = seq_mask.sum()
        loss = masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
        if loss_agg_mode == "seq-mean-token-sum-norm":
            loss = loss / (loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
        return loss
    if loss_agg_mode == "seq-mean-token-mean":
        tokens = torch.sum(loss_mask, dim=-1)  # (B,)
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (tokens + 1e-8)  # (B,)
        seq_mask = (tokens > 0).float()
        if global_batch_size is None:
            if dp_size > 1:
                raise ValueError("global_batch_size is required when dp_size > 1")
            global_batch_size = seq_mask.sum()
        return masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
    raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")


# ---- policy losses -------------------------------------------------------------------------------------------

PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
#: verl's POLICY_LOSS_REGISTRY (bypass_mode left out: it needs the rollout's log-probs in the batch); plugins:
#: entry points of the group ``metaagent.policy_losses`` (the local backend only: verl has its own registry)
POLICY_LOSS_REGISTRY: Registry[PolicyLossFn] = Registry("policy loss", ValueError, group=POLICY_LOSS_GROUP)
register_policy_loss = POLICY_LOSS_REGISTRY.register


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """The policy loss registered as ``name`` (verl's refusal text for an unknown one)."""
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(f"Unsupported loss mode: {name}. Supported modes are: {POLICY_LOSS_REGISTRY.names()}")
    return POLICY_LOSS_REGISTRY.get(name)


def _weighted(pg_losses: torch.Tensor, rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    return pg_losses if rollout_is_weights is None else pg_losses * rollout_is_weights


def _agg(pg_losses, response_mask, loss_agg_mode, s: LossSettings) -> torch.Tensor:
    return agg_loss(pg_losses, response_mask, loss_agg_mode, **s.global_batch_info)


def _item(x: torch.Tensor | float) -> float:
    return float(x.detach().item()) if isinstance(x, torch.Tensor) else float(x)


@register_policy_loss("vanilla")
def policy_loss_vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s: LossSettings,
                        rollout_is_weights=None):  # fmt: skip
    """PPO-clip with verl's dual clip (paper Eq. 2 when ``clip_ratio_c`` is infinite)::

        rho = exp(clamp(logp - logp_old, -20, 20))
        l   = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high));   for A < 0: min(l, -A c)
    """
    if not s.clip_ratio_c > 1.0:
        raise ValueError(f"The lower bound of the clip_ratio_c for dual-clip PPO should be greater than 1.0, got {s.clip_ratio_c}")
    neg_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)  # (B, R)
    ratio = torch.exp(neg_kl)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - s.clip_ratio_low, 1 + s.clip_ratio_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_losses3 = -advantages * s.clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    loss = _agg(_weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode, s)
    return loss, {
        "pg_clipfrac": _item(masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)),
        "ppo_kl": _item(masked_mean(-neg_kl, response_mask)),
        "pg_clipfrac_lower": _item(
            masked_mean(torch.gt(clip_pg_losses1, pg_losses3) * (advantages < 0).float(), response_mask)
        ),
    }


def _dppo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s, rollout_is_weights, valid):
    """DPPO-Binary (arXiv 2602.04879): ``-A * sg(min(rho, c)) * logp`` on the tokens ``valid`` keeps."""
    neg_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(neg_kl)
    truncated_ratio = torch.clamp(ratio, max=s.clip_ratio_c).detach()
    valid_mask = valid.detach().float()
    pg_losses = -advantages * truncated_ratio * log_prob * valid_mask
    loss = _agg(_weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode, s)
    return loss, {
        "pg_clipfrac": _item(masked_mean((1.0 - valid_mask).float(), response_mask)),
        "ppo_kl": _item(masked_mean(-neg_kl, response_mask)),
        "pg_clipfrac_lower": _item(masked_mean((ratio > s.clip_ratio_c).float() * valid_mask, response_mask)),
    }


@register_policy_loss("dppo_tv")
def policy_loss_dppo_tv(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s: LossSettings,
                        rollout_is_weights=None):  # fmt: skip
    """DPPO-Binary-TV: a token is kept unless ``p - p_old`` leaves ``[-eps_low, eps_high]`` in the direction of A."""
    prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
    valid = torch.where(advantages > 0, (prob - old_prob) <= s.clip_ratio_high, (prob - old_prob) >= -s.clip_ratio_low)
    return _dppo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s, rollout_is_weights, valid)


@register_policy_loss("dppo_kl")
def policy_loss_dppo_kl(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s: LossSettings,
                        rollout_is_weights=None):  # fmt: skip
    """DPPO-Binary-KL: the binary KL between ``p_old`` and ``p`` bounds the move in the direction of A."""
    prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
    binary_kl = old_prob * (old_log_prob - log_prob) + (1 - old_prob) * torch.log(
        (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8)
    )
    valid = torch.where(
        advantages > 0, (binary_kl <= s.clip_ratio_high) | (prob <= old_prob), (binary_kl <= s.clip_ratio_low) | (prob >= old_prob)
    )  # fmt: skip
    return _dppo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s, rollout_is_weights, valid)


@register_policy_loss("gspo")
def policy_loss_gspo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s: LossSettings,
                     rollout_is_weights=None):  # fmt: skip
    """GSPO (arXiv 2507.18071): the length-normalised sequence ratio ``s_i = exp(mean_t (logp - logp_old))``,
    per token ``s_it = sg(s_i) * p_t / sg(p_t)`` (log clamped at 10), clipped as PPO."""
    neg_kl = log_prob - old_log_prob
    seq_lengths = torch.sum(response_mask, dim=-1).clamp(min=1)  # (B,)
    neg_kl_seq = torch.sum(neg_kl * response_mask, dim=-1) / seq_lengths  # (B,)
    log_ratio = torch.clamp(log_prob - log_prob.detach() + neg_kl_seq.detach().unsqueeze(-1), max=10.0)
    ratio = torch.exp(log_ratio)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - s.clip_ratio_low, 1 + s.clip_ratio_high)
    pg_losses = torch.maximum(pg_losses1, pg_losses2)
    loss = _agg(_weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode, s)
    return loss, {
        "pg_clipfrac": _item(masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)),
        "ppo_kl": _item(masked_mean(-neg_kl, response_mask)),
        "pg_clipfrac_lower": 0.0,
    }


@register_policy_loss("sapo")
def policy_loss_sapo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s: LossSettings,
                     rollout_is_weights=None):  # fmt: skip
    """SAPO (arXiv 2511.20347): ``-A * sigmoid(tau (rho - 1)) * 4 / tau``, tau = tau_pos for A > 0 else
    tau_neg; always aggregated seq-mean-token-mean (as verl does, whatever ``loss_agg_mode`` says)."""
    tau_pos = torch.as_tensor(s.tau_pos, dtype=advantages.dtype, device=advantages.device)
    tau_neg = torch.as_tensor(s.tau_neg, dtype=advantages.dtype, device=advantages.device)
    neg_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(neg_kl)
    taus = torch.where(advantages > 0, tau_pos, tau_neg)
    gates = torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus)
    pg_losses = -gates * advantages
    loss = _agg(_weighted(pg_losses, rollout_is_weights), response_mask, "seq-mean-token-mean", s)
    return loss, {"pg_clipfrac": 0.0, "ppo_kl": _item(masked_mean(-neg_kl, response_mask)), "pg_clipfrac_lower": 0.0}


@register_policy_loss("gpg")
def policy_loss_gpg(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s: LossSettings,
                    rollout_is_weights=None):  # fmt: skip
    """GPG: plain policy gradient ``-logp * A`` (no ratio, no clip)."""
    pg_losses = -log_prob * advantages
    return _agg(_weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode, s), {}


@register_policy_loss("clip_cov")
def policy_loss_clip_cov(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s: LossSettings,
                         rollout_is_weights=None):  # fmt: skip
    """Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs"): PPO-clip, plus the gradient
    of a random ``clip_cov_ratio`` share of the unclipped tokens whose centred covariance
    ``(A - mean A)(logp - mean logp)`` lies in ``(lb, ub)`` is cut (uses torch's global RNG)."""
    if not s.clip_cov_ratio > 0:
        raise ValueError("clip_ratio should be larger than 0.")
    neg_kl = log_prob - old_log_prob
    ratio = torch.exp(neg_kl)
    pg_losses1 = -advantages * ratio
    corr = torch.ones_like(advantages)
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - s.clip_ratio_low, 1 + s.clip_ratio_high)
    clip_by_origin = (pg_losses2 > pg_losses1) & (response_mask > 0)
    cov_all = (advantages - masked_mean(advantages, response_mask)) * (
        log_prob - masked_mean(log_prob.detach(), response_mask)
    )
    cov_all[response_mask == 0] = -torch.inf
    cov_all[clip_by_origin] = -torch.inf
    clip_num = max(int(s.clip_cov_ratio * response_mask.sum().item()), 1)
    top_k_idx = torch.nonzero((cov_all < s.clip_cov_ub) & (cov_all > s.clip_cov_lb) & (response_mask > 0))
    if len(top_k_idx) > 0:
        perm = torch.randperm(len(top_k_idx))
        top_k_idx = top_k_idx[perm[: min(clip_num, len(top_k_idx))]]
    else:
        top_k_idx = torch.empty((0, 2), device=cov_all.device, dtype=torch.long)
    corr[top_k_idx[:, 0], top_k_idx[:, 1]] = 0
    pg_losses = torch.maximum(pg_losses1, pg_losses2) * corr
    loss = _agg(_weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode, s)
    return loss, {
        "pg_clipfrac": _item(masked_mean((corr == 0).float(), response_mask)),
        "ppo_kl": _item(masked_mean(-neg_kl, response_mask)),
    }


@register_policy_loss("kl_cov")
def policy_loss_kl_cov(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s: LossSettings,
                       rollout_is_weights=None):  # fmt: skip
    """KL-Cov (same paper): ``-A rho``, and on the top ``kl_cov_ratio`` share of tokens by covariance
    ``-A rho + ppo_kl_coef |logp - logp_old|``. Its ``ppo_kl`` metric is the mean absolute log-ratio."""
    if not s.kl_cov_ratio > 0:
        raise ValueError("kl_cov_ratio should be larger than 0.")
    neg_kl = log_prob - old_log_prob
    abs_kl = neg_kl.abs()
    ratio = torch.exp(neg_kl)
    pg_losses_kl = -advantages * ratio + s.ppo_kl_coef * abs_kl
    pg_losses = -advantages * ratio
    all_valid = response_mask > 0
    all_valid_idx = torch.nonzero(all_valid.reshape(-1), as_tuple=True)[0]
    all_valid_adv = advantages[all_valid].detach().reshape(-1).cpu()
    all_valid_logp = log_prob[all_valid].detach().reshape(-1).cpu()
    if min(s.kl_cov_ratio, len(all_valid_adv)) != 0:
        cov = (all_valid_adv - all_valid_adv.mean()) * (all_valid_logp - all_valid_logp.mean())
        top = torch.topk(cov, max(1, int(len(cov) * s.kl_cov_ratio)), largest=True).indices
        if len(top) != 0:
            flat = all_valid_idx[top]
            rows, cols = flat // advantages.shape[1], flat % advantages.shape[1]
            pg_losses[rows, cols] = pg_losses_kl[rows, cols]
    loss = _agg(_weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode, s)
    return loss, {"ppo_kl": _item(masked_mean(neg_kl.abs(), response_mask))}


@register_policy_loss("geo_mean")
def policy_loss_geo_mean(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s: LossSettings,
                         rollout_is_weights=None):  # fmt: skip
    """GMPO (arXiv 2507.20673): per response ``-A_i * exp(mean_t clip_sgn(logp - logp_old))`` (token-level clip
    in the direction of A), the plain mean over responses (``loss_agg_mode`` unused, as in verl; token IS
    weights enter as their per-response geometric mean)."""
    neg_kl = log_prob - old_log_prob
    sgn = torch.sign(advantages)
    neg_kl_clamp = torch.clamp(neg_kl, -s.clip_ratio_low, s.clip_ratio_high)
    neg_kl_min = sgn * torch.min(sgn * neg_kl, sgn * neg_kl_clamp)
    tokens = response_mask.sum(dim=-1)  # (B,)
    ratio = torch.exp((neg_kl_min * response_mask).sum(dim=-1) / (tokens + 1e-8))  # (B,)
    advantage = (advantages * response_mask).sum(dim=-1) / (tokens + 1e-8)  # (B,)
    pg_losses = -advantage * ratio
    if rollout_is_weights is not None:
        pg_losses = pg_losses * torch.exp((torch.log(rollout_is_weights + 1e-10) * response_mask).sum(dim=-1) / (tokens + 1e-8))
    clipped = torch.ne(neg_kl, neg_kl_clamp)
    return torch.mean(pg_losses), {
        "pg_clipfrac": _item(masked_mean((clipped * (advantages > 0)).float(), response_mask)),
        "ppo_kl": _item(masked_mean(-neg_kl, response_mask)),
        "pg_clipfrac_lower": _item(masked_mean((clipped * (advantages < 0)).float(), response_mask)),
    }


@register_policy_loss("dro")
def policy_loss_dro(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s: LossSettings,
                    rollout_is_weights=None):  # fmt: skip
    """DRO: ``-(logp * A - beta / 2 * (logp - logp_old)^2)``; needs ``dro_beta > 0``."""
    if s.dro_beta is None or s.dro_beta <= 0:
        raise ValueError("policy_loss.dro_beta must be a positive value when using DRO")
    log_ratio = log_prob - old_log_prob
    pg_losses = -(log_prob * advantages - 0.5 * s.dro_beta * log_ratio.square())
    loss = _agg(_weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode, s)
    return loss, {"ppo_kl": _item(masked_mean(-log_ratio, response_mask))}


@register_policy_loss("cispo")
def policy_loss_cispo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, s: LossSettings,
                      rollout_is_weights=None):  # fmt: skip
    """CISPO (arXiv 2506.13585): ``-sg(clip(rho, 1 - eps_low, 1 + eps_high)) * A * logp``."""
    neg_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(neg_kl)
    clipped_ratio = torch.clamp(ratio, 1 - s.clip_ratio_low, 1 + s.clip_ratio_high)
    pg_losses = -clipped_ratio.detach() * advantages * log_prob
    loss = _agg(_weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode, s)
    return loss, {
        "pg_clipfrac": _item(masked_mean((ratio != clipped_ratio).float(), response_mask)),
        "ppo_kl": _item(masked_mean(-neg_kl, response_mask)),
        "pg_clipfrac_lower": 0.0,
    }


# ---- KL and value losses -------------------------------------------------------------------------------------


def kl_penalty_forward(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimators (Schulman 2020, "Approximating KL divergence"), (B, R) -> (B, R)::

        k1 (kl):        logp - logp_ref
        abs:            |logp - logp_ref|
        k2 (mse):       (logp - logp_ref)^2 / 2
        k3 (low_var_kl): clamp(exp(d) - d - 1, -10, 10),  d = clamp(logp_ref - logp, -20, 20)
    """
    if kl_penalty in ("kl", "k1"):
        return logprob - ref_logprob
    if kl_penalty == "abs":
        return (logprob - ref_logprob).abs()
    if kl_penalty in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    if kl_penalty in ("low_var_kl", "k3"):
        kl = torch.clamp(ref_logprob - logprob, min=-20, max=20)
        return torch.clamp((torch.exp(kl) - kl - 1).contiguous(), min=-10, max=10)
    raise NotImplementedError(f"kl_penalty {kl_penalty!r}")


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """:func:`kl_penalty_forward`; a trailing ``+`` (``k3+``) keeps the forward value and takes the k2
    gradient (straight-through), whose expectation is the true KL gradient."""
    base = kl_penalty[:-1] if kl_penalty.endswith("+") else kl_penalty
    forward = kl_penalty_forward(logprob, ref_logprob, base)
    if not kl_penalty.endswith("+") or kl_penalty in ("mse", "k2"):
        return forward
    backward = 0.5 * (logprob - ref_logprob).square()
    return backward - backward.detach() + forward.detach()


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    batch_num_tokens: int | None = None,
    global_batch_size: int | None = None,
    loss_scale_factor: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss ``0.5 * agg(max((V - R)^2, (clip(V, V_old - eps, V_old + eps) - R)^2))`` on
    (B, R) tensors, and the share of tokens where the clipped term is larger."""
    vpredclipped = torch.max(torch.min(vpreds, values + cliprange_value), values - cliprange_value)
    vf_losses1 = (vpreds - returns) ** 2
    vf_losses2 = (vpredclipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(
        torch.max(vf_losses1, vf_losses2), response_mask, loss_agg_mode, dp_size=dp_size,
        batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size, loss_scale_factor=loss_scale_factor,
    )  # fmt: skip
    return vf_loss, masked_mean(torch.gt(vf_losses2, vf_losses1).float(), response_mask)


# ---- rollout correction (truncated importance sampling) -----------------------------------------------------


def rollout_is_weights(
    log_ratio: torch.Tensor, response_mask: torch.Tensor, level: str, cap: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance weights (verl's ``compute_rollout_correction_weights`` with one threshold, no batch
    normalisation), (B, R) -> (B, R), detached, 0 on padding::

        token:     w_t = min(exp(clamp(d_t, -20, 20)), C)
        sequence:  w_t = min(exp(clamp(sum_t' d_t', -20, 20)), C)           d = logp_train - logp_rollout

    Metrics (verl's names): ``rollout_is_mean`` (masked mean of the weights), and the share above the cap:
    ``rollout_is_ratio_fraction_high`` (token level: of tokens, by the raw weight; sequence level: of
    responses, by the log-ratio sum) and ``rollout_is_seq_fraction_high`` (responses whose mean raw weight
    exceeds C).
    """
    if level not in ("token", "sequence"):
        raise ValueError(f"Invalid rollout_is: {level}. Must be one of {{'token', 'sequence'}}.")
    if not response_mask.any():
        raise ValueError("response_mask must contain at least one valid token (1).")
    if level == "token":
        for_metrics = log_ratio
        raw = torch.exp(torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND))
    else:
        for_metrics = masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(-1)  # (B, 1)
        raw = torch.exp(torch.clamp(for_metrics, min=-SAFETY_BOUND, max=SAFETY_BOUND)).expand_as(log_ratio)
    raw = raw * response_mask
    weights = raw.clamp(max=cap)
    if level == "sequence":
        log_cap = torch.log(torch.tensor(cap, device=log_ratio.device))
        frac_high = (for_metrics > log_cap).float().mean()
    else:
        frac_high = masked_mean((raw > cap).float(), response_mask)
    raw_seq_mean = masked_mean(raw, response_mask, axis=-1)  # (B,)
    metrics = {
        "rollout_is_mean": _item(masked_mean(weights, response_mask)),
        "rollout_is_ratio_fraction_high": _item(frac_high),
        "rollout_is_seq_fraction_high": _item((raw_seq_mean > cap).float().mean()),
    }
    return weights.detach(), metrics


def mismatch_kl(train_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor) -> dict[str, float]:
    """KL(rollout || train) over the response tokens (verl's ``compute_offpolicy_metrics``): ``kl`` =
    mean(logp_rollout - logp_train), ``k3_kl`` = mean(r - log r - 1) with r = p_train / p_rollout."""
    log_ratio = train_log_prob - rollout_log_prob
    return {
        "kl": _item(masked_mean(rollout_log_prob - train_log_prob, response_mask)),
        "k3_kl": _item(masked_mean(torch.exp(log_ratio) - log_ratio - 1, response_mask)),
    }
