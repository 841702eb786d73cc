"""The one optimizer config (AdamW, gradient clipping, micro-batching, learning-rate schedule) and the one
loss config (PPO-clip, aggregation, KL and entropy terms, and per role its own aggregation and entropy bonus:
``per_role``), with the name lists they accept.

:class:`OptimizerConfig` is shared by every program that takes gradient steps: the RL trainer's ``optim``
section (:class:`metaagent.train.config.OptimConfig` adds the loss knobs of
:class:`metaagent.learn.losses.LossConfig`), which the local backend hands to each
:class:`~metaagent.train.local.update.PolicyUpdater` and the verl backend maps onto
``actor_rollout_ref.actor.optim.*``; and SFT (:class:`metaagent.sft.trainer.SFTConfig`). Each program
keeps its own defaults where the papers differ (SFT: no weight decay, cosine schedule).

Learning rate of optimizer step ``s`` (0-based) out of ``T`` (:func:`lr_at`), with peak ``lr``, ``W``
warmup steps and floor ``min_lr_ratio * lr``::

    s < W:                 lr * (s + 1) / W                                 (linear warmup)
    constant:              lr
    cosine:                floor + (lr - floor) * (1 + cos(pi * p)) / 2,    p = min(1, (s - W) / max(1, T - W - 1))

It is a pure function of the step, so a resumed run continues the schedule exactly without scheduler state.
(verl's own warmup starts from 0 rather than ``lr / W``; with the default ``warmup_steps: 0`` both agree.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from metaagent.config import Checked, parse_sections, registered_name
from metaagent.learn.recompute import Recompute
from metaagent.policy.precision import bf16_supported, cpu_kind
from metaagent.records import DESIGNER, EXECUTOR, ROLES
from metaagent.registry import entry_points

SCHEDULES = ("constant", "cosine")
#: verl 0.9's POLICY_LOSS_REGISTRY (bypass_mode needs rollout importance weights: not offered): the built-in
#: names of :data:`metaagent.learn.core_algos.POLICY_LOSS_REGISTRY`, listed here so a config is checked without torch
POLICY_LOSSES = (
    "vanilla", "dppo_tv", "dppo_kl", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "dro", "cispo",
)  # fmt: skip
#: the entry-point group of plugin policy losses (``@register_policy_loss`` functions of verl's signature)
POLICY_LOSS_GROUP = "metaagent.policy_losses"


def policy_loss_names() -> list[str]:
    """Every policy loss a config may name: the built-ins and the installed plugins (nothing imported)."""
    return [*POLICY_LOSSES, *sorted(set(entry_points(POLICY_LOSS_GROUP)) - set(POLICY_LOSSES))]


PolicyLossName = registered_name(policy_loss_names, "policy loss")

#: verl's agg_loss modes (see metaagent.learn.losses)
LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
#: verl's default truncation of the importance weights (algorithm.rollout_correction.rollout_is_threshold)
DEFAULT_TIS_CAP = 2.0
#: verl's kl_penalty types
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k1+", "k3+", "low_var_kl+")
Beta = Annotated[float, Field(ge=0, lt=1)]


@dataclass
class OptimizerConfig(Checked):
    """AdamW with global grad-norm clipping over token-budgeted micro-batches (paper §4.1: lr 5e-6; verl's
    defaults otherwise)."""

    lr: PositiveFloat = 5e-6  # peak learning rate (paper §4.1: 5e-6)
    betas: tuple[Beta, Beta] = (0.9, 0.999)  # AdamW betas
    weight_decay: NonNegativeFloat = 0.01  # AdamW decoupled weight decay (verl's default)
    adam_eps: PositiveFloat = 1e-8  # AdamW epsilon
    grad_clip: PositiveFloat = 1.0  # max global gradient norm
    schedule: Literal["constant", "cosine"] = "constant"  # learning rate after warmup (see lr_at)
    warmup_steps: NonNegativeInt = 0  # linear warmup from lr / warmup_steps over this many optimizer steps
    min_lr_ratio: Annotated[float, Field(ge=0, le=1)] = 0.1  # cosine: floor as a fraction of lr
    # padded tokens (rows x longest sequence) per forward/backward pass; "auto": UPDATE_DEFAULTS there
    micro_batch_tokens: PositiveInt | Literal["auto"] = 4096
    logprob_chunk: PositiveInt = 256  # response tokens per LM-head chunk (never the B x T x V logits)
    # what decoder layers keep for backward in the local update (metaagent.learn.recompute): "selective" keeps the
    # matrix products' outputs and recomputes the elementwise rest (same gradients; make demo's peak 3.54 vs 3.99 GB,
    # updates ~1.14x slower: benchmarks/demo_memory.py); "full" recomputes whole layers; "off" keeps
    # everything; "auto": UPDATE_DEFAULTS for the device
    recompute: Recompute | Literal["auto"] = "selective"
    # "bfloat16" autocasts forward passes; master weights stay fp32 (no fp16: no loss scaler); "auto": bfloat16
    # where the device has bf16 matrix units (metaagent.policy.precision), else off
    autocast: Literal["auto", "bfloat16"] | None = None


@dataclass
class RoleLoss(Checked):
    """One role's own loss settings (``optim.per_role.<role>``); an unset (null) field is the shared ``optim``
    setting. Issue 62: the designer's single-agent scripts are ~2.4x shorter than its team scripts, so
    ``seq-mean-token-mean`` (every design weighs the same) weighs each of their tokens up; a designer-only
    ``token-sum`` or ``seq-mean-token-sum-norm`` weighs every token alike without changing the executor's
    Eq. 2 aggregation."""

    # this role's loss aggregation (metaagent.learn.losses; null: optim.loss_agg_mode). token-sum: verl agg_loss;
    # seq-mean-token-sum-norm: Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-like training"), sum / a constant
    loss_agg_mode: Literal[LOSS_AGG_MODES] | None = None
    # this role's entropy bonus, - coef * agg(entropy) over the role's own samples (verl actor.entropy_coeff;
    # null: optim.entropy_coef)
    entropy_coef: NonNegativeFloat | None = None

    def settings(self) -> dict[str, Any]:
        """The fields that are set, by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}


@dataclass
class PerRoleLoss(Checked):
    """``optim.per_role``: each role's overrides of the shared loss settings (:class:`RoleLoss`)."""

    designer: RoleLoss = field(default_factory=RoleLoss)  # the designer's samples (scripts)
    executor: RoleLoss = field(default_factory=RoleLoss)  # the executor's samples (agent calls)

    def __post_init__(self) -> None:
        parse_sections(self)  # PerRoleLoss(designer={"entropy_coef": 0.01}) parses the mapping like YAML
        super().__post_init__()


@dataclass
class LossConfig(Checked):
    """PPO-clip settings (paper Eq. 2-3; :mod:`metaagent.learn.losses`). ``clip_low``/``clip_high`` are the
    ``eps`` of Eq. 2 below/above 1; the paper does not state eps, 0.2 is this project's choice (PPO's and
    verl's default). ``per_role`` gives a role its own aggregation and entropy bonus (:meth:`for_role`)."""

    clip_low: Annotated[float, Field(gt=0, lt=1)] = 0.2  # eps of Eq. 2 below 1 (PPO's and verl's 0.2)
    clip_high: PositiveFloat = 0.2  # eps of Eq. 2 above 1
    dual_clip: bool = False  # verl's dual clip at clip_ratio_c (not in Eq. 2)
    clip_ratio_c: Annotated[float, Field(gt=1)] = 3.0  # dual-clip bound for negative advantages (verl: 3)
    # verl's policy-loss registry (vanilla, gspo, cispo, ...), or a plugin's (entry-point group metaagent.policy_losses,
    # local backend only)
    policy_loss: PolicyLossName = "vanilla"
    loss_agg_mode: Literal[LOSS_AGG_MODES] = "seq-mean-token-mean"  # Eq. 2's 1/|G| sum over trajectories; verl: token-mean
    kl_coef: NonNegativeFloat = 0.0  # KL to a frozen reference model (0: no KL term, no reference model)
    kl_type: Literal[KL_TYPES] = "low_var_kl"  # verl's kl_penalty estimator
    entropy_coef: NonNegativeFloat = 0.0  # entropy bonus (verl: entropy_coeff); 0 as in the paper
    # rollout/training mismatch correction, truncated importance sampling (Yao et al. 2025; verl's
    # algorithm.rollout_correction.rollout_is_threshold): each token's loss is weighted by
    # min(pi_train / pi_rollout, tis_cap) (metaagent.learn.losses.tis_weights); None = off
    tis_cap: Annotated[float, Field(gt=0)] | None = None
    tis_level: Literal["token", "sequence"] = "token"  # per-token ratio, or the whole response's product
    # each role's own loss_agg_mode / entropy_coef (unset: the shared ones above), e.g.
    # {designer: {loss_agg_mode: token-sum}}; the local update applies a role's settings to that role's samples
    per_role: PerRoleLoss = field(default_factory=PerRoleLoss)

    def __post_init__(self) -> None:
        parse_sections(self)  # LossConfig(per_role={...}): the mapping parsed like YAML
        super().__post_init__()

    def for_role(self, role: str) -> LossConfig:
        """The loss settings of ``role``'s samples: these, with ``per_role.<role>``'s set fields instead."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; roles are {ROLES}")
        own = getattr(self.per_role, role).settings()
        return dataclasses.replace(self, per_role=PerRoleLoss(), **own) if own else self

    def role_differences(self) -> dict[str, tuple[Any, Any]]:
        """Setting -> (designer's, executor's) for every setting the two roles do not share."""
        d, e = self.for_role(DESIGNER), self.for_role(EXECUTOR)
        names = [f.name for f in dataclasses.fields(RoleLoss)]
        return {n: (getattr(d, n), getattr(e, n)) for n in names if getattr(d, n) != getattr(e, n)}


def lr_at(step: int, total_steps: int, cfg: OptimizerConfig) -> float:
    """Learning rate of optimizer step ``step`` (0-based) of ``total_steps`` (module docstring)."""
    base = float(cfg.lr)
    if step < cfg.warmup_steps:
        return base * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return base
    span = max(1, total_steps - cfg.warmup_steps - 1)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    floor = base * cfg.min_lr_ratio
    return floor + (base - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_adamw(params: Any, cfg: OptimizerConfig) -> Any:
    """torch AdamW with the config's betas, epsilon and weight decay, at the peak learning rate."""
    import torch

    return torch.optim.AdamW(
        params, lr=float(cfg.lr), betas=tuple(cfg.betas), eps=cfg.adam_eps, weight_decay=cfg.weight_decay
    )


def autocast_dtype(setting: str | None, device: str) -> str | None:
    """``optim.autocast`` resolved: ``"auto"`` -> ``"bfloat16"`` where the device has bf16 matrix units, else None."""
    if setting == "auto":
        return "bfloat16" if bf16_supported(device) else None
    return setting


def autocast(cfg: OptimizerConfig, device_type: str) -> Any:
    """The forward passes' autocast context (``cfg.autocast``; fp32 master weights either way)."""
    import torch

    dtype = autocast_dtype(cfg.autocast, device_type)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=getattr(torch, dtype))


#: the local update's micro-batch budget and recomputation mode per (CPU kind, the update's compute dtype),
#: as benchmarks/update_modes.py measured (results/update_modes_<kind>.txt): the setting of least CPU time
#: whose peak RSS stays within the memory goal on the peer benchmark's work (benchmarks/peer_trl.py)
UPDATE_DEFAULTS: dict[tuple[str, str], dict[str, Any]] = {
    # 2-core AMD EPYC, bf16 autocast: off takes 1.23x less update CPU than selective at 768 tokens (3072: no
    # faster) but the peer step's peak RSS rises 2,195 -> ~2,710 MiB (0.72x -> 0.88x TRL's 3,060,
    # benchmarks/results/peer_trl_avx512_bf16.txt): selective, the lower peak, as the memory goal asks
    ("avx512_bf16", "bfloat16"): {"micro_batch_tokens": 768, "recompute": "selective"},
    # 2-core AMD EPYC with AVX2 only, fp32 (16 samples): 4096/selective takes 1.24x less update CPU than
    # 768/selective but doubles the update's peak (2,776 -> 5,602 MiB); off 1.14x less at +12%; full 0.86x.
    # The peer step's peak is already 0.72x TRL's (benchmarks/results/peer_trl_avx2.txt), above the 0.6x goal:
    # 768/selective, the lowest peak but one (full: -2%, 1.16x more CPU) (benchmarks/results/update_modes_avx2.txt)
    ("AVX2", "float32"): {"micro_batch_tokens": 768, "recompute": "selective"},
}
#: where nothing was measured, per device type: on CPU make demo's budget and mode before issue #63, elsewhere
#: OptimizerConfig's own defaults
FALLBACK_UPDATE: dict[str, dict[str, Any]] = {
    "cpu": {"micro_batch_tokens": 768, "recompute": "selective"},
    "other": {"micro_batch_tokens": 4096, "recompute": "selective"},
}


def update_defaults(device: str, autocast: str | None) -> dict[str, Any]:
    """``micro_batch_tokens`` and ``recompute`` for an update on ``device`` computing in ``autocast`` (None:
    fp32), from :data:`UPDATE_DEFAULTS` (CPUs by :func:`metaagent.policy.precision.cpu_kind`), else
    :data:`FALLBACK_UPDATE`."""
    cpu = str(device).split(":", 1)[0] == "cpu"
    found = UPDATE_DEFAULTS.get((cpu_kind(), autocast or "float32")) if cpu else None
    return dict(found or FALLBACK_UPDATE["cpu" if cpu else "other"])


def resolve_update(cfg: Any, device: str) -> Any:
    """``cfg`` (an :class:`OptimizerConfig` or a subclass) with ``"auto"`` ``micro_batch_tokens`` and
    ``recompute`` replaced by :func:`update_defaults` for ``device`` and ``cfg.autocast`` resolved there."""
    auto = [f for f in ("micro_batch_tokens", "recompute") if getattr(cfg, f) == "auto"]
    if not auto:
        return cfg
    chosen = update_defaults(device, autocast_dtype(cfg.autocast, device))
    return dataclasses.replace(cfg, **{f: chosen[f] for f in auto})

