"""One policy-gradient step of one physical model: micro-batched PPO-clip with gradient accumulation.

``PolicyUpdater.update(samples)`` is one optimizer step per training step:

1. samples of roles outside ``active_roles`` are dropped before anything is forwarded, so they contribute
   exactly zero gradient and do not count in the loss normaliser (paper §4.1: "gradients from the inactive
   role are masked");
2. each role's samples form its own group G^r (Eq. 2): ``L = L_D + L_E``, each aggregated over its own
   role's batch (in ``coupled`` mode both terms are present; otherwise one), with the role's own loss
   settings (``loss.for_role(r)``: ``optim.per_role.<role>``'s aggregation and entropy bonus, else the
   shared ones);
3. a role's samples are split into micro-batches by a padded-token budget
   (:func:`~metaagent.learn.samples.micro_batches`); each micro-batch: chunked log-probs
   (:mod:`~metaagent.learn.logprobs`), verl's policy loss normalised over the role's *whole* batch
   (:mod:`~metaagent.learn.losses`), ``backward()``; the accumulated gradient therefore equals the gradient
   of the big-batch loss;
4. grad-norm clipping (1.0), AdamW step on fp32 master weights. The step is skipped when the grad norm is
   not finite, and when no sample has a non-zero advantage: such a step has no policy gradient, and an
   AdamW step would still move the weights through momentum and weight decay.

Shared or separate designer/executor weights: hold one updater per physical model and route samples with
:func:`~metaagent.learn.samples.route_samples`.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from metaagent.config import Checked
from metaagent.errors import MetaAgentError
from metaagent.learn.logprobs import naive_response_logprobs, response_logprobs
from metaagent.learn.losses import SUMMED_METRICS, GlobalBatch, dpo_loss, policy_loss
from metaagent.learn.recompute import RECOMPUTE, enable_recompute
from metaagent.learn.optim import LossConfig, OptimizerConfig, autocast, lr_at, make_adamw, resolve_update
from metaagent.learn.samples import (
    PairSample,
    RoleToModel,
    Sample,
    active_role_set,
    collate,
    micro_batches,
    route_samples,
)
from metaagent.records import ROLES

LOGPROB_IMPLS = ("chunked", "naive")  # "naive": the full-logits reference, for tests and benchmarks only


class UpdateError(MetaAgentError, ValueError):
    """The updater is misconfigured or got unusable samples; the message says what to change."""


@dataclass
class UpdateOptions(Checked):
    """How the updater computes (not what it optimises): the log-prob implementation and memory switches."""

    logprob_impl: Literal[LOGPROB_IMPLS] = "chunked"  # or "naive" (full B x L x V logits; reference for benchmarks)
    compute_entropy: bool = True  # log train/entropy (detached, chunked)
    recompute: Literal[RECOMPUTE] = "selective"  # what decoder layers keep for backward: OptimConfig.recompute
    pad_id: int = 0


def _split_settings(settings: dict[str, Any]) -> tuple[OptimizerConfig, LossConfig, UpdateOptions]:
    groups = (OptimizerConfig, LossConfig, UpdateOptions)
    known = {name for cls in groups for name in cls.__dataclass_fields__}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise UpdateError(f"unknown updater setting(s) {unknown}; known: {sorted(known)}")
    return tuple(  # type: ignore[return-value]
        cls(**{k: v for k, v in settings.items() if k in cls.__dataclass_fields__}) for cls in groups
    )


def _check_fp32(model: torch.nn.Module, name: str) -> None:
    bad = {str(p.dtype) for p in model.parameters() if p.is_floating_point() and p.dtype != torch.float32}
    if bad:
        raise UpdateError(
            f"{name} has {sorted(bad)} parameters; the updater keeps fp32 master weights: load it with "
            "dtype=torch.float32 and use autocast='bfloat16' for bf16 compute"
        )


class PolicyUpdater:
    """AdamW PPO-clip updates of ``model`` from :class:`~metaagent.learn.samples.Sample` lists.

    Args:
        model: a Hugging Face causal LM with fp32 parameters.
        ref_model: frozen reference model for the KL term (``kl_coef > 0``), DPO and the reference pre-pass.
        ref_context: instead of ``ref_model``: the reference is ``model`` itself inside this context (LoRA:
            :meth:`metaagent.train.local.lora.AdapterSet.reference`, the shared frozen base with every adapter off),
            so no copy is held. Reference forwards run under ``no_grad`` with the same chunking either way.
        optim: the :class:`~metaagent.learn.optim.OptimizerConfig` (AdamW, clipping, micro-batches, schedule).
        loss: the :class:`~metaagent.learn.optim.LossConfig` (Eq. 2-3 PPO-clip, KL, entropy).
        options: :class:`UpdateOptions` (log-prob implementation, pad id, what backward recomputes).
        total_steps: the run's optimizer steps, for a cosine ``optim.schedule`` (the learning rate of step
            ``s`` is :func:`~metaagent.learn.optim.lr_at`, ``s`` counting this updater's optimizer steps).
        params: the parameters to optimise (default: every parameter of ``model`` that requires grad); LoRA
            passes one adapter's (:mod:`metaagent.train.local.lora`).
        model_context: entered around every forward of ``model`` (LoRA: makes this updater's adapter the
            active one on a base shared with other adapters).
        **settings: instead of the three configs, any of their fields by name (tests, benchmarks).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        ref_model: torch.nn.Module | None = None,
        ref_context: Callable[[], contextlib.AbstractContextManager] | None = None,
        optim: OptimizerConfig | None = None,
        loss: LossConfig | None = None,
        options: UpdateOptions | None = None,
        total_steps: int | None = None,
        params: Sequence[torch.nn.Parameter] | None = None,
        model_context: Callable[[], contextlib.AbstractContextManager] | None = None,
        **settings: Any,
    ) -> None:
        if settings and (optim is not None or loss is not None or options is not None):
            raise UpdateError("pass either optim=/loss=/options= configs or keyword settings, not both")
        s_optim, s_loss, s_options = _split_settings(settings)
        self.optim = resolve_update(optim or s_optim, str(next(model.parameters()).device))
        self.loss = loss or s_loss
        self.options = options or s_options
        self.total_steps = total_steps
        if self.optim.schedule != "constant" and not total_steps:
            raise UpdateError(f"optim.schedule={self.optim.schedule} needs total_steps (the run's optimizer steps)")
        _check_fp32(model, "model")
        if ref_model is not None and ref_context is not None:
            raise UpdateError("pass ref_model (a frozen copy) or ref_context (the model's own frozen base), not both")
        self.model = model
        self.ref_model = ref_model
        self._ref_context = ref_context
        if self.loss.kl_coef > 0 and not self.has_reference:
            raise UpdateError("kl_coef > 0 needs ref_model (a frozen copy of the initial policy)")
        if ref_model is not None:
            ref_model.eval().requires_grad_(False)
        enable_recompute(model, self.options.recompute)
        self.params = list(params) if params is not None else [p for p in model.parameters() if p.requires_grad]
        self._model_context = model_context or contextlib.nullcontext
        if not self.params:
            raise UpdateError("model has no trainable parameters (all requires_grad=False)")
        self.optimizer = make_adamw(self.params, self.optim)
        self.steps = 0
        self._pending = False  # gradients accumulated since the last step
        self._signal = False  # some accumulated sample has a non-zero advantage

    @property
    def has_reference(self) -> bool:
        """A reference policy is available: a loaded copy (``ref_model``) or the shared base (``ref_context``)."""
        return self.ref_model is not None or self._ref_context is not None

    @torch.no_grad()
    def _reference_logprobs(self, data: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(B, R)`` log pi_ref of ``data``'s response tokens: the loaded copy, or ``model`` inside
        ``ref_context`` (adapters off); chunked like the policy's, no graph."""
        if self.ref_model is not None:
            ref, _ = response_logprobs(self.ref_model, data, chunk_size=self.optim.logprob_chunk)
            return ref
        with self._ref_context():
            ref, _ = response_logprobs(self.model, data, chunk_size=self.optim.logprob_chunk)
        return ref

    @property
    def device(self) -> torch.device:
        return self.params[0].device

    def _autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.optim, self.device.type)

    def _select(
        self, samples: Iterable[Sample], active_roles: Iterable[str] | None, metrics: dict[str, float]
    ) -> list[Sample]:
        samples = list(samples)
        for i, s in enumerate(samples):
            if not isinstance(s, Sample):
                raise UpdateError(f"samples[{i}] is {type(s).__name__}, expected Sample (see build_samples)")
            if len(s.old_logprobs) != len(s.response_ids) or not s.prompt_ids or not s.response_ids:
                raise UpdateError(
                    f"samples[{i}] (key {s.key}) is malformed: build samples with build_samples"
                )
        if active_roles is None:
            return samples
        active = active_role_set(active_roles, UpdateError)
        kept = [s for s in samples if s.role in active]
        for role, n in Counter(s.role for s in samples if s.role not in active).items():
            metrics[f"train/samples_inactive/{role}"] = float(n)
        return kept

    def _device_batch(self, mb: Sequence[Sample]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device) for k, v in collate(mb, self.options.pad_id).items()}

    def _logprobs(
        self, data: dict[str, torch.Tensor], loss: LossConfig
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        with_entropy = self.options.compute_entropy or loss.entropy_coef > 0
        if self.options.logprob_impl == "naive":
            logp, entropy = naive_response_logprobs(self.model, data, with_entropy=with_entropy)
            return logp, (entropy if loss.entropy_coef > 0 or entropy is None else entropy.detach())
        return response_logprobs(
            self.model,
            data,
            chunk_size=self.optim.logprob_chunk,
            with_entropy=with_entropy,
            entropy_grad=loss.entropy_coef > 0,
        )

    def accumulate(
        self, samples: Iterable[Sample], *, active_roles: Iterable[str] | None = None
    ) -> dict[str, float]:
        """Forward and backward all samples of one step, leaving the gradient in ``.grad``; no optimizer step.

        Call it once per step: the loss is normalised over exactly these samples' tokens.
        """
        if self._pending:
            raise UpdateError(
                "accumulate() was already called since the last step(); pass all samples of a step in one call "
                "so the token-mean is over the whole batch"
            )
        metrics: dict[str, float] = {}
        samples = self._select(samples, active_roles, metrics)
        metrics["train/samples"] = float(len(samples))
        for role in ROLES:
            metrics[f"train/samples/{role}"] = float(sum(s.role == role for s in samples))
            metrics[f"train/tokens/{role}"] = float(
                sum(len(s.response_ids) for s in samples if s.role == role)
            )
        n_tokens = sum(len(s.response_ids) for s in samples)
        metrics["train/tokens"] = float(n_tokens)
        if not samples:
            return metrics
        sums: Counter[str] = Counter()
        weighted: Counter[str] = Counter()
        n_micro = 0
        was_training = self.model.training
        self.model.train()
        try:
            for role in ROLES:
                group = [s for s in samples if s.role == role]  # G^r of Eq. 2
                if not group:
                    continue
                loss = self.loss.for_role(role)  # optim.per_role.<role> over the shared settings
                batch = GlobalBatch(
                    num_tokens=sum(len(s.response_ids) for s in group),
                    num_samples=len(group),
                    loss_scale_factor=(
                        max(len(s.response_ids) for s in group)
                        if loss.loss_agg_mode == "seq-mean-token-sum-norm"
                        else None
                    ),
                )
                for mb in micro_batches(group, self.optim.micro_batch_tokens):
                    n_micro += 1
                    m, mb_tokens, padded = self._backward(mb, batch, loss)
                    for k, v in m.items():
                        if k in SUMMED_METRICS:
                            sums[k] += v
                        else:
                            weighted[k] += v * mb_tokens
                    metrics["train/padded_tokens"] = metrics.get("train/padded_tokens", 0.0) + padded
        finally:
            self.model.train(was_training)
        self._pending = True
        self._signal = any(
            (s.advantage != 0) if s.token_advantages is None else any(a != 0 for a in s.token_advantages)
            for s in samples
        )
        metrics.update({k: float(v) for k, v in sums.items()})
        metrics.update({k: float(v) / n_tokens for k, v in weighted.items()})
        metrics["train/micro_batches"] = float(n_micro)
        metrics["train/adv_mean"] = (
            sum(sum(s.token_advantages) if s.token_advantages is not None else s.advantage * len(s.response_ids) for s in samples)
            / n_tokens
        )
        return metrics

    def _backward(
        self, mb: Sequence[Sample], batch: GlobalBatch, config: LossConfig
    ) -> tuple[dict[str, float], float, float]:
        """Loss of one micro-batch (its share of ``batch``'s loss, with its role's ``config``) and
        ``backward()``, in the model context (checkpointed chunks recompute their forward during ``backward()``)."""
        with self._model_context():
            return self._backward_in_context(mb, batch, config)

    def _backward_in_context(
        self, mb: Sequence[Sample], batch: GlobalBatch, config: LossConfig
    ) -> tuple[dict[str, float], float, float]:
        data = self._device_batch(mb)
        with self._autocast():
            # the reference first: with ref_context it is the policy's own base with its adapters switched off
            ref_logp = self._reference_logprobs(data) if config.kl_coef > 0 else None
            logp, entropy = self._logprobs(data, config)
        loss, m = policy_loss(
            logp,
            data["old_log_probs"],
            data["advantages"],
            data["response_mask"],
            config=config,
            batch=batch,
            ref_log_probs=ref_logp,
            entropy=entropy,
        )
        loss.backward()
        return m, float(data["response_mask"].sum()), float(data["input_ids"].numel())

    @torch.no_grad()
    def ref_logprobs(self, samples: Sequence[Sample]) -> list[list[float]]:
        """The reference pre-pass: ``log pi_ref`` of every response token of ``samples`` (at each sample's
        temperature, like the rollout log-probs), forward-only and micro-batched, before any loss. Token
        stages that put the KL into the reward (MAPPA) need the whole batch's values before the advantages."""
        if not self.has_reference:
            raise UpdateError("reference log-probs need ref_model (a frozen copy of the initial policy)")
        out: dict[int, list[float]] = {}
        index = {id(s): n for n, s in enumerate(samples)}
        for mb in micro_batches(list(samples), self.optim.micro_batch_tokens):
            data = self._device_batch(mb)
            with self._autocast():
                ref = self._reference_logprobs(data)  # (B, R)
            ref = ref.float().cpu()
            for row, s in enumerate(mb):
                out[index[id(s)]] = ref[row, : len(s.response_ids)].tolist()
        return [out[n] for n in range(len(samples))]

    def accumulate_pairs(self, pairs: Sequence[PairSample], *, beta: float = 0.1) -> dict[str, float]:
        """Forward and backward the DPO loss of ``pairs`` (:func:`metaagent.learn.losses.dpo_loss`) against
        the reference, adding to the accumulated gradient; :meth:`step` applies it."""
        if not self.has_reference:
            raise UpdateError("the DPO loss needs ref_model (a frozen copy of the initial policy)")
        if not pairs:
            return {"train/dpo_pairs": 0.0}
        chosen, rejected = zip(*(p.sides() for p in pairs))
        rows = [*chosen, *rejected]
        data = self._device_batch(rows)
        was_training = self.model.training
        self.model.train()
        try:
            with self._model_context():
                with self._autocast():
                    ref = self._reference_logprobs(data)  # (2P, R), before the policy's graph is built
                    logp, _ = response_logprobs(self.model, data, chunk_size=self.optim.logprob_chunk)  # (2P, R)
                seq, ref_seq = logp.sum(-1), ref.sum(-1)  # (2P,)
                n = len(pairs)
                weights = torch.tensor([p.weight for p in pairs], dtype=seq.dtype, device=seq.device)
                loss, metrics = dpo_loss(seq[:n], seq[n:], ref_seq[:n], ref_seq[n:], beta=beta, weights=weights)
                loss.backward()
        finally:
            self.model.train(was_training)
        self._pending = self._signal = True
        metrics["train/dpo_pairs"] = float(n)
        return metrics

    def step(self) -> dict[str, float]:
        """Clip the accumulated gradient and take one AdamW step (skipped when nothing was accumulated)."""
        lr = lr_at(self.steps, self.total_steps or self.steps + 1, self.optim)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        metrics = {"train/lr": lr}
        if not self._pending:
            metrics["train/skipped_step"] = 1.0
            return metrics
        if not self._signal:  # every advantage is 0: no policy gradient, and no momentum/decay-only step
            self.optimizer.zero_grad(set_to_none=True)
            self._pending = False
            metrics["train/skipped_step"] = 1.0
            metrics["train/zero_advantage_step"] = 1.0
            return metrics
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.optim.grad_clip)
        metrics["train/grad_norm"] = float(grad_norm)
        if torch.isfinite(grad_norm):
            self.optimizer.step()
            self.steps += 1
            metrics["train/skipped_step"] = 0.0
        else:
            metrics["train/skipped_step"] = 1.0
            metrics["train/nonfinite_grad"] = 1.0
        self.optimizer.zero_grad(set_to_none=True)
        self._pending = False
        return metrics

    def update(
        self,
        samples: Iterable[Sample],
        *,
        active_roles: Iterable[str] | None = None,
        pairs: Sequence[PairSample] = (),
        dpo_beta: float = 0.1,
    ) -> dict[str, float]:
        """``accumulate`` (+ ``accumulate_pairs`` when ``pairs``) + ``step``: one optimizer step on these
        samples, the DPO loss of the preference pairs added to the policy loss. Returns ``train/*`` metrics."""
        t0 = time.perf_counter()
        metrics = self.accumulate(samples, active_roles=active_roles)
        if pairs:
            metrics.update(self.accumulate_pairs(pairs, beta=dpo_beta))
        metrics.update(self.step())
        elapsed = time.perf_counter() - t0
        metrics["train/update_s"] = elapsed
        metrics["train/tokens_per_s"] = metrics["train/tokens"] / elapsed if elapsed > 0 else 0.0
        return metrics

    def reset_moments(self) -> None:
        """Forget AdamW's moments and step count (``optim.stage_switch: reset`` at a stage boundary), so the
        first steps of a stage do not apply the previous stage's momentum."""
        self.optimizer.state.clear()

    def state_dict(self) -> dict[str, Any]:
        """Optimizer state and step count (the model weights are saved separately, in HF format)."""
        return {"optimizer": self.optimizer.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])


def update_routed(
    updaters: dict[str, PolicyUpdater],
    samples: Iterable[Sample],
    role_to_model_key: RoleToModel,
    *,
    active_roles: Iterable[str] | None = None,
    pairs: Sequence[PairSample] = (),
    dpo_beta: float = 0.1,
) -> dict[str, float]:
    """One step of every physical model: route samples (and preference pairs) by role
    (:func:`route_samples`) and update each.

    Every updater is called, also without samples (its step is then skipped and reported), so each model's
    metrics appear every step. With one model the metrics keep their ``train/...`` names; with several they
    become ``train/<model key>/...``.
    """
    routed = route_samples(samples, role_to_model_key)
    unknown = sorted(set(routed) - set(updaters))
    if unknown:
        raise UpdateError(
            f"samples routed to model key(s) {unknown} that have no updater; updaters: {sorted(updaters)}"
        )
    routed_pairs = route_samples(pairs, role_to_model_key) if pairs else {}
    metrics: dict[str, float] = {}
    for key, updater in updaters.items():
        m = updater.update(
            routed.get(key, []), active_roles=active_roles, pairs=routed_pairs.get(key, []), dpo_beta=dpo_beta
        )
        if len(updaters) == 1:
            metrics.update(m)
        else:
            metrics.update({f"train/{key}/{k.removeprefix('train/')}": v for k, v in m.items()})
    return metrics


def ref_logprobs_routed(
    updaters: dict[str, PolicyUpdater], samples: Sequence[Sample], role_to_model_key: RoleToModel
) -> list[list[float]]:
    """:meth:`PolicyUpdater.ref_logprobs` of every sample under its own model's reference, in input order."""
    out: dict[int, list[float]] = {}
    index = {id(s): n for n, s in enumerate(samples)}
    for key, group in route_samples(samples, role_to_model_key).items():
        if key not in updaters:
            raise UpdateError(f"samples routed to model key {key!r} that has no updater; updaters: {sorted(updaters)}")
        for s, ref in zip(group, updaters[key].ref_logprobs(group)):
            out[index[id(s)]] = ref
    return [out[n] for n in range(len(samples))]
