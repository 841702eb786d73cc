"""The GRPO / PPO-clip objective of one micro-batch (paper Eq. 2-3), computed by verl's own functions.

Per response token t of trajectory i, with ``rho = exp(logp_theta - logp_old)`` against the rollout
log-probs (Eq. 3)::

    L_it = -min(rho * A_i, clip(rho, 1 - eps_low, 1 + eps_high) * A_i)      (Eq. 2, token level)

``policy_loss`` names any loss in verl's policy-loss registry (``vanilla`` is the formula above; ``gspo``
uses the length-normalised sequence ratio, the closest to Eq. 3's ratio of whole-output probabilities; see
``verl.trainer.ppo.core_algos.POLICY_LOSS_REGISTRY`` for the rest). ``dual_clip`` adds verl's lower bound
``-A * clip_ratio_c`` for A < 0 (not in Eq. 2; off by default here, on by default in verl).

Aggregation (``loss_agg_mode``), always normalised by the *whole* training batch of the role, so the
micro-batch losses add up to the big-batch loss:

- ``seq-mean-token-mean`` (default): the mean over each trajectory's tokens, then ``1/|G| sum_i`` over
  trajectories: Eq. 2's ``1/|G^r| sum_{i in G^r}``, every trajectory (agent call or design) weighs the same;
- ``token-mean``: one mean over all tokens of the batch (verl's default; long trajectories weigh more);
- ``seq-mean-token-sum`` / ``seq-mean-token-sum-norm`` / ``token-sum``: Dr. GRPO-style variants.

Optional terms, both off by default::

    + kl_coef * agg(kl_penalty(logp_theta, logp_ref, kl_type))     KL to a frozen reference model
    - entropy_coef * agg(entropy)                                  entropy bonus

Rollout/training mismatch correction (``tis_cap``, off by default here; the RL config's ``auto`` turns it on
for a bf16 rollout; :func:`tis_weights`): the PPO ratio is taken against the trainer's own log-probs at the
pre-update weights, and each token's policy-gradient term is multiplied by the truncated importance weight
``min(pi_train / pi_rollout, C)`` (Yao et al. 2025). With or without it, the mismatch itself is reported
(``train/mismatch_kl``, :func:`mismatch_metrics`).

The arithmetic is verl 0.9.1's own functions (``compute_policy_loss_vanilla`` and the rest of its
policy-loss registry, ``agg_loss``, ``kl_penalty``, ``compute_value_loss``, the rollout-correction weights),
ported to :mod:`metaagent.learn.core_algos` so that this path needs neither verl nor Ray, and checked against
verl's functions wherever verl is installed (``tests/verl/test_core_algos_parity.py``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from metaagent.errors import MetaAgentError

from . import core_algos
from .optim import KL_TYPES, LOSS_AGG_MODES, POLICY_LOSSES, LossConfig

__all__ = [
    "KL_TYPES", "LOSS_AGG_MODES", "POLICY_LOSSES", "LossConfig", "GlobalBatch", "policy_loss", "dpo_loss", "tis_weights",
    "tis_metrics", "mismatch_metrics",
]  # fmt: skip

#: metrics that are this micro-batch's share of a whole-batch quantity: add them over micro-batches
SUMMED_METRICS = frozenset({"train/loss", "train/pg_loss", "train/kl_loss", "train/entropy_loss"})
#: the other metrics are means over this micro-batch's response tokens: weight them by its token count


class LossError(MetaAgentError, ValueError):
    """The loss is misconfigured or its inputs disagree; the message says what to change."""


NO_DUAL_CLIP = math.inf  # clip_ratio_c that disables verl's dual clip (A < 0 losses are never capped)


@dataclass(frozen=True)
class GlobalBatch:
    """Sizes of the whole training batch (all micro-batches of one optimizer step).

    ``loss_scale_factor`` is the constant divisor of ``seq-mean-token-sum-norm`` (default there: the
    longest response of the batch, so every micro-batch uses the same one).
    """

    num_tokens: int  # response tokens
    num_samples: int
    loss_scale_factor: int | None = None

    def __post_init__(self) -> None:
        if self.num_tokens < 1 or self.num_samples < 1:
            raise LossError(
                f"a training batch needs >= 1 sample and token, got {self.num_samples} / {self.num_tokens}"
            )


def loss_settings(config: LossConfig, batch: GlobalBatch) -> core_algos.LossSettings:
    """The clip ratios and the global batch info the loss functions read (what verl's ``ActorConfig`` carries)."""
    return core_algos.LossSettings(
        clip_ratio_low=config.clip_low,
        clip_ratio_high=config.clip_high,
        clip_ratio_c=config.clip_ratio_c if config.dual_clip else NO_DUAL_CLIP,
        batch_num_tokens=batch.num_tokens,
        global_batch_size=batch.num_samples,
        loss_scale_factor=batch.loss_scale_factor,
    )


def verl_actor_config(config: LossConfig, batch: GlobalBatch) -> Any:
    """verl's own ``ActorConfig`` with :func:`loss_settings`, for verl's loss functions (parity tests)."""
    return loss_settings(config, batch).verl_actor_config(config.loss_agg_mode)


def role_advantage_scales(
    sizes: dict[str, tuple[int, int]], loss_agg_mode: str
) -> dict[str, float]:
    """Advantage scale per role that makes ONE aggregation over all roles' samples equal ``L_D + L_E``, each
    aggregated over its own role (Eq. 2 per role), for backends that take one batch (verl's ``update_actor``).

    ``sizes`` maps role -> (samples, response tokens). The policy-gradient term is positively homogeneous in
    the advantage (``min(rho*cA, clip(rho)*cA) = c*min(rho*A, clip(rho)*A)`` for c > 0), so dividing by the
    whole batch and multiplying role r's advantages by ``total / size_r`` gives ``sum_r L_r``. KL and entropy
    terms are not scaled (they are off by default). One role: every scale is 1.
    """
    if len(sizes) <= 1 or loss_agg_mode == "token-sum":
        return {r: 1.0 for r in sizes}
    index = 1 if loss_agg_mode == "token-mean" else 0  # token-mean divides by tokens, seq-mean-* by samples
    total = sum(v[index] for v in sizes.values())
    return {r: total / v[index] for r, v in sizes.items()}


def _token_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    n = float(mask.sum())
    return float((x.detach() * mask).sum()) / n if n else 0.0


def tis_weights(
    train_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    cap: float,
    level: str = "token",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance sampling against the rollout engine's log-probs (Yao et al. 2025, "Your efficient
    RL framework secretly brings you off-policy RL training"; verl's ``rollout_is`` with one threshold)::

        token:     w_t = min(exp(logp_train_t - logp_rollout_t), C)
        sequence:  w_t = min(exp(sum_t' (logp_train_t' - logp_rollout_t')), C)     (one weight per response)

    detached (the weights change the measure, not the objective) and 0 on padding. verl's
    ``compute_rollout_correction_weights`` and ``compute_offpolicy_metrics`` do the arithmetic (ported:
    :func:`metaagent.learn.core_algos.rollout_is_weights`, :func:`~metaagent.learn.core_algos.mismatch_kl`).

    Args:
        train_log_probs: (B, R) the trainer's log-probs at the pre-update weights (pi_old recomputed).
        rollout_log_probs: (B, R) the log-probs the rollout engine recorded when it sampled the tokens.
        response_mask: (B, R) 1 for response tokens.
        cap: C > 0.
        level: ``token`` or ``sequence``.

    Returns:
        ``(weights (B, R), metrics)``: ``train/tis_clipfrac`` (share of tokens, or of responses at sequence
        level, whose raw weight exceeds C), ``train/tis_weight_mean``, and the mismatch between the two
        computations: ``train/mismatch_kl`` (KL(rollout || train), direct estimator), ``train/mismatch_k3_kl``.
    """
    if not cap > 0:
        raise LossError(f"the TIS cap must be > 0, got {cap}")
    if train_log_probs.shape != rollout_log_probs.shape or response_mask.shape != train_log_probs.shape:
        raise LossError(
            f"TIS needs three (B, R) tensors of one shape, got {tuple(train_log_probs.shape)}, "
            f"{tuple(rollout_log_probs.shape)}, {tuple(response_mask.shape)}"
        )
    train = train_log_probs.detach().float()
    rollout = rollout_log_probs.detach().float()
    mask = response_mask.float()
    weights, m = core_algos.rollout_is_weights(train - rollout, mask, level, float(cap))
    off = core_algos.mismatch_kl(train, rollout, mask)
    return weights.to(train_log_probs.dtype), tis_metrics({**m, **off}, level)


#: metaagent's names of verl's off-policy metrics (``compute_offpolicy_metrics``): KL(rollout || train), direct
#: and k3 estimators
MISMATCH_METRICS = {"train/mismatch_kl": "kl", "train/mismatch_k3_kl": "k3_kl"}


def mismatch_metrics(
    train_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """How far the rollout's log-probs are from the trainer's, without correcting anything: ``train/mismatch_kl``
    and ``train/mismatch_k3_kl`` (verl's ``compute_offpolicy_metrics``; (B, R) tensors). Reported every step, so
    a bf16 rollout's distance from the fp32 trainer is visible with TIS off as well as on."""
    off = core_algos.mismatch_kl(
        train_log_probs.detach().float(), rollout_log_probs.detach().float(), response_mask.float()
    )
    return {name: float(off[key]) for name, key in MISMATCH_METRICS.items()}


def tis_metrics(verl_metrics: dict[str, float], level: str, prefix: str = "") -> dict[str, float]:
    """metaagent's TIS / mismatch metrics from verl's rollout-correction metrics: the one name map, used by the
    local backend (:func:`tis_weights`) and the verl backend (``rollout_corr/*`` of verl's
    ``compute_rollout_correction_and_add_to_batch``, ``prefix="rollout_corr/"``).

    ``train/tis_clipfrac`` is verl's ``rollout_is_ratio_fraction_high`` (token level: share of tokens whose raw
    weight exceeds the cap) or ``rollout_is_seq_fraction_high`` (sequence level: share of responses);
    ``train/tis_weight_mean`` is ``rollout_is_mean``; ``train/mismatch_kl`` / ``train/mismatch_k3_kl`` are
    ``kl`` / ``k3_kl`` (KL(rollout || train), direct and k3 estimators).
    """
    frac = "rollout_is_seq_fraction_high" if level == "sequence" else "rollout_is_ratio_fraction_high"
    return {
        "train/tis_clipfrac": float(verl_metrics[prefix + frac]),
        "train/tis_weight_mean": float(verl_metrics[prefix + "rollout_is_mean"]),
        **{name: float(verl_metrics[prefix + key]) for name, key in MISMATCH_METRICS.items()},
    }


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    config: LossConfig,
    batch: GlobalBatch,
    ref_log_probs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss of one micro-batch and its metrics (module docstring).

    Args:
        log_probs: (B, R) log-probs under the current policy (differentiable).
        old_log_probs: (B, R) rollout log-probs (pi_old of Eq. 3).
        advantages: (B, R) advantage of each token (its sample's advantage).
        response_mask: (B, R) 1 for response tokens, 0 for padding.
        batch: sizes of the whole step's batch; the returned loss is this micro-batch's share of it.
        ref_log_probs: (B, R) reference-model log-probs; required when ``config.kl_coef > 0``.
        entropy: (B, R) token entropies, for logging and (``entropy_coef > 0``, differentiable) the bonus.

    Returns:
        ``(loss, metrics)``; metrics in :data:`SUMMED_METRICS` add up over micro-batches, the others
        (``train/pg_clipfrac``, ``train/pg_clipfrac_lower``, ``train/ppo_kl``, ``train/entropy``,
        ``train/ref_kl``, ``train/mismatch_kl``, ``train/mismatch_k3_kl``, ``train/tis_*``) are means over this
        micro-batch's tokens.
    """
    shape = log_probs.shape
    for name, t in (
        ("old_log_probs", old_log_probs),
        ("advantages", advantages),
        ("response_mask", response_mask),
    ):
        if t.shape != shape:
            raise LossError(f"{name} has shape {tuple(t.shape)} but log_probs has {tuple(shape)}")
    settings = loss_settings(config, batch)
    mask = response_mask.to(log_probs.dtype)  # (B, R)
    loss, metrics = _pg_term(log_probs, old_log_probs, advantages, mask, config, settings)
    agg = functools.partial(
        core_algos.agg_loss,
        loss_mask=mask,
        loss_agg_mode=config.loss_agg_mode,
        **settings.global_batch_info,
    )
    if config.kl_coef > 0:
        loss = loss + config.kl_coef * _kl_term(log_probs, ref_log_probs, mask, config, agg, metrics)
    if entropy is not None:
        metrics["train/entropy"] = _token_mean(entropy, mask)
        if config.entropy_coef > 0:
            if not entropy.requires_grad:
                raise LossError("entropy_coef > 0 needs differentiable entropies (entropy_grad=True)")
            entropy_loss = agg(loss_mat=entropy)
            loss = loss - config.entropy_coef * entropy_loss
            metrics["train/entropy_loss"] = float(entropy_loss.detach())
    elif config.entropy_coef > 0:
        raise LossError("entropy_coef > 0 needs the token entropies")
    metrics["train/loss"] = float(loss.detach())
    return loss, metrics


def _pg_term(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: LossConfig,
    settings: core_algos.LossSettings,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The registered policy loss (``optim.policy_loss``) of one micro-batch, with TIS weights when
    ``tis_cap`` is set, and its metrics (``train/pg_loss``, the TIS / mismatch ones, the clip fractions)."""
    is_weights = None
    if config.tis_cap is not None:
        # pi_old of the ratio is the trainer's own computation at the pre-update weights (one optimizer step
        # per batch: the current weights); the rollout log-probs only enter through the TIS weights
        is_weights, tis_metrics = tis_weights(
            log_probs.detach(), old_log_probs, mask, cap=config.tis_cap, level=config.tis_level
        )
        old_log_probs = log_probs.detach()
    else:
        tis_metrics = mismatch_metrics(log_probs, old_log_probs, mask)
    try:
        pg_loss, pg_metrics = core_algos.get_policy_loss_fn(config.policy_loss)(
            old_log_probs, log_probs, advantages, mask, config.loss_agg_mode, settings, rollout_is_weights=is_weights
        )
    except ValueError as e:  # a setting the chosen loss refuses (e.g. dro without a beta)
        raise LossError(f"optim.policy_loss={config.policy_loss}: {e}") from None
    metrics = {
        "train/pg_loss": float(pg_loss.detach()),
        **tis_metrics,
    }
    for name in ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"):
        if name in pg_metrics:  # not every registered loss reports all three
            metrics[f"train/{name}"] = float(pg_metrics[name])
    return pg_loss, metrics


def _kl_term(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor | None,
    mask: torch.Tensor,
    config: LossConfig,
    agg: Callable[..., torch.Tensor],
    metrics: dict[str, float],
) -> torch.Tensor:
    """The aggregated KL penalty to the reference model (``kl_type``); adds ``train/kl_loss`` and
    ``train/ref_kl`` to ``metrics``."""
    if ref_log_probs is None:
        raise LossError(
            "kl_coef > 0 needs ref_log_probs from a reference model (pass ref_model to the updater)"
        )
    kld = core_algos.kl_penalty(
        logprob=log_probs, ref_logprob=ref_log_probs, kl_penalty=config.kl_type
    )  # (B, R)
    kl_loss = agg(loss_mat=kld)
    metrics["train/kl_loss"] = float(kl_loss.detach())
    metrics["train/ref_kl"] = _token_mean(kld, mask)
    return kl_loss


def dpo_loss(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    *,
    beta: float = 0.1,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO (Rafailov et al. 2023) on preference pairs, the failure route of evaluation-aligned credit (seed
    002, Eq. 12, ``L_pref = -E_(c, y+, y-, w)[w log sigmoid(beta ([..y+..] - [..y-..]))]``), the expectation
    taken as the mean over the P pairs of the batch::

        L = -(1 / P) * sum_p w_p * log sigmoid(beta * [(log pi(y+|x) - log ref(y+|x))
                                                       - (log pi(y-|x) - log ref(y-|x))])

    A pair's weight scales its term and its gradient (``w = 0``: the pair teaches nothing); dividing by
    ``sum w`` instead would cancel the weight of a single pair. With every ``w = 1`` this is DPO's mean loss.

    Args:
        chosen_logps, rejected_logps: (P,) summed response log-probs under the policy (differentiable).
        ref_chosen_logps, ref_rejected_logps: (P,) the same under the frozen reference model.
        beta: the KL strength of DPO.
        weights: (P,) pair weights >= 0 (default 1), e.g. the judge's confidence.

    Returns:
        ``(loss, metrics)`` with ``train/dpo_loss``, ``train/dpo_margin`` (mean beta-scaled margin) and
        ``train/dpo_accuracy`` (share of pairs whose margin is positive).
    """
    if not beta > 0:
        raise LossError(f"DPO beta must be > 0, got {beta}")
    shapes = {t.shape for t in (chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps)}
    if len(shapes) != 1 or chosen_logps.dim() != 1 or chosen_logps.numel() == 0:
        raise LossError(f"DPO needs four (P,) tensors of one shape with P >= 1, got {sorted(map(tuple, shapes))}")
    w = torch.ones_like(chosen_logps) if weights is None else weights.to(chosen_logps.dtype)  # (P,)
    if w.shape != chosen_logps.shape or bool((w < 0).any()) or not bool(torch.isfinite(w).all()):
        raise LossError(f"DPO pair weights must be P = {chosen_logps.numel()} finite values >= 0, got {w.tolist()}")
    margin = beta * ((chosen_logps - ref_chosen_logps) - (rejected_logps - ref_rejected_logps))  # (P,)
    loss = -(w * torch.nn.functional.logsigmoid(margin)).mean()
    return loss, {
        "train/dpo_loss": float(loss.detach()),
        "train/dpo_margin": float(margin.detach().mean()),
        "train/dpo_accuracy": float((margin.detach() > 0).float().mean()),
    }


#: metrics of :func:`value_loss` that are this micro-batch's share of the whole batch's loss
VALUE_SUMMED_METRICS = frozenset({"train/critic/vf_loss"})


def value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    cliprange_value: float,
    batch: GlobalBatch,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped value loss of one micro-batch (the critic of UnityMAS-O's GAE, Eq. 20-21), by verl's
    ``core_algos.compute_value_loss`` (ported, as its critic worker calls it)::

        V_clip = clip(V_theta, V_old - eps_v, V_old + eps_v)
        L_V    = 0.5 * agg( max((V_theta - R)^2, (V_clip - R)^2) )

    Args:
        vpreds: (B, R) values of the response tokens under the critic being trained (differentiable).
        returns: (B, R) value targets ``R_t = A_t + V_old_t`` (GAE before whitening).
        values: (B, R) the critic's values at rollout time (``V_old``; the pre-update pass).
        response_mask: (B, R) 1 for response tokens, 0 for padding.
        cliprange_value: ``eps_v`` (verl ``critic.cliprange_value``, default 0.5).
        batch: sizes of the whole step's batch; the loss is this micro-batch's share of it.

    Returns:
        ``(loss, metrics)``: ``train/critic/vf_loss`` (adds up over micro-batches), ``train/critic/vf_clipfrac``
        and ``train/critic/vpred_mean`` (means over this micro-batch's tokens).
    """
    shape = vpreds.shape
    for name, t in (("returns", returns), ("values", values), ("response_mask", response_mask)):
        if t.shape != shape:
            raise LossError(f"{name} has shape {tuple(t.shape)} but vpreds has {tuple(shape)}")
    if not cliprange_value > 0:
        raise LossError(f"cliprange_value must be > 0, got {cliprange_value}")
    mask = response_mask.to(vpreds.dtype)
    loss, clipfrac = core_algos.compute_value_loss(
        vpreds=vpreds,
        returns=returns.to(vpreds.dtype),
        values=values.to(vpreds.dtype),
        response_mask=mask,
        cliprange_value=cliprange_value,
        loss_agg_mode=loss_agg_mode,
        dp_size=1,
        batch_num_tokens=batch.num_tokens,
        global_batch_size=batch.num_samples,
        loss_scale_factor=batch.loss_scale_factor,
    )
    return loss, {
        "train/critic/vf_loss": float(loss.detach()),
        "train/critic/vf_clipfrac": float(clipfrac),
        "train/critic/vpred_mean": _token_mean(vpreds, mask),
    }
