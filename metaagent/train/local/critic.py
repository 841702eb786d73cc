"""The critic of GAE estimators on the local backend (UnityMAS-O, seed 001, Eq. 20-21).

What it is, following the authors' code rather than a guess: ``star_ppo/ray_trainer.py`` builds one verl
critic worker group per trained LLM (``_clone_critic_cfg_for_model``: the critic's model path is that LLM's
actor path), and verl's critic is ``AutoModelForTokenClassification`` with ``num_labels = 1`` and dropout 0
(``verl/utils/model.py::load_valuehead_model``): the policy's backbone, a copy with its own weights, plus a
fresh linear head on the last hidden state. So here: one :class:`Critic` per physical model, initialised from
the same weights as that model (or ``critic.model``), trained with its own AdamW.

Per step, for the samples routed to its model::

    values(samples)   V_t of every response token, read at the position that predicts the token (as verl's
                      ``no_padding_2_padding``: the hidden state of the context before token t), before any
                      update: the V_old of the clipped value loss and the V of GAE
    update(samples)   one AdamW step on verl's clipped value loss (metaagent.learn.losses.value_loss) towards
                      Sample.returns, micro-batched, normalised over the whole batch

Metrics are ``train/critic/*``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from metaagent.errors import MetaAgentError
from metaagent.learn.losses import VALUE_SUMMED_METRICS, GlobalBatch, value_loss
from metaagent.learn.optim import OptimizerConfig, make_adamw
from metaagent.learn.samples import Sample, collate, micro_batches
from metaagent.policy.models import resolve_model


class CriticError(MetaAgentError, ValueError):
    """The critic got unusable samples or settings; the message says what to change."""


def load_value_model(name_or_path: str, *, device: str = "cpu") -> torch.nn.Module:
    """verl's critic model for ``name_or_path`` (an alias or an HF folder): ``AutoModelForTokenClassification``
    with one label and no dropout, fp32, on ``device``. From a causal-LM folder the backbone weights are
    reused and the head ``score`` is new; from a saved critic folder everything is loaded."""
    from transformers import AutoConfig, AutoModelForTokenClassification
    from transformers.utils import logging as hf_logging

    path = resolve_model(name_or_path)
    config = AutoConfig.from_pretrained(path)
    config.num_labels = 1
    config.classifier_dropout = 0.0
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "some weights were newly initialised": the value head, by design
    try:
        model = AutoModelForTokenClassification.from_pretrained(path, config=config, dtype=torch.float32)
    finally:
        hf_logging.set_verbosity(verbosity)
    return model.to(device)


class Critic:
    """A value model and its optimizer (one per trained physical model).

    Args:
        model: a token-classification model with one label (:func:`load_value_model`).
        optim: AdamW settings (``critic.lr``, ``critic.weight_decay``, ``critic.grad_clip``; micro-batch budget).
        cliprange_value: ``eps_v`` of the clipped value loss (verl: 0.5).
        loss_agg_mode: aggregation of the value loss (verl's critic: ``token-mean``).
        pad_id: the tokenizer's pad id.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        optim: OptimizerConfig,
        cliprange_value: float = 0.5,
        loss_agg_mode: str = "token-mean",
        pad_id: int = 0,
    ) -> None:
        if getattr(getattr(model, "config", None), "num_labels", None) != 1:
            raise CriticError("the critic needs a value model with one output per token (load_value_model)")
        self.model = model
        self.optim = optim
        self.cliprange_value = cliprange_value
        self.loss_agg_mode = loss_agg_mode
        self.pad_id = pad_id
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = make_adamw(self.params, optim)
        self.steps = 0

    @property
    def device(self) -> torch.device:
        return self.params[0].device

    def _forward(self, data: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, R) values of the response tokens: the head's output at ``response_index`` (the position whose
        hidden state predicts each response token)."""
        out = self.model(
            input_ids=data["input_ids"], attention_mask=data["attention_mask"], position_ids=data["position_ids"]
        )
        v = out.logits.squeeze(-1)  # (B, L)
        return torch.gather(v, 1, data["response_index"])  # (B, R)

    def _batch(self, mb: Sequence[Sample]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device) for k, v in collate(mb, self.pad_id).items()}

    @torch.no_grad()
    def values(self, samples: Sequence[Sample]) -> list[list[float]]:
        """``V_t`` of every response token of ``samples``, in input order (forward only, eval mode)."""
        out: dict[int, list[float]] = {}
        index = {id(s): n for n, s in enumerate(samples)}
        was_training = self.model.training
        self.model.eval()
        try:
            for mb in micro_batches(list(samples), self.optim.micro_batch_tokens):
                v = self._forward(self._batch(mb)).float().cpu()
                for row, s in enumerate(mb):
                    out[index[id(s)]] = v[row, : len(s.response_ids)].tolist()
        finally:
            self.model.train(was_training)
        return [out[n] for n in range(len(samples))]

    def update(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One AdamW step of the clipped value loss over ``samples`` (each with ``values`` and ``returns``, from
        the GAE token stage). No samples: no step (reported as ``train/critic/skipped_step``)."""
        t0 = time.perf_counter()
        samples = [s for s in samples if s.returns is not None]
        metrics: dict[str, float] = {"train/critic/samples": float(len(samples)), "train/critic/lr": float(self.optim.lr)}
        if not samples:
            metrics["train/critic/skipped_step"] = 1.0
            return metrics
        for s in samples:
            if s.values is None or len(s.values) != len(s.response_ids) or len(s.returns) != len(s.response_ids):
                raise CriticError(f"sample {s.key}: values and returns need one entry per response token")
        n_tokens = sum(len(s.response_ids) for s in samples)
        batch = GlobalBatch(num_tokens=n_tokens, num_samples=len(samples))
        sums: Counter[str] = Counter()
        weighted: Counter[str] = Counter()
        self.model.train()
        try:
            for mb in micro_batches(samples, self.optim.micro_batch_tokens):
                data = self._batch(mb)
                old = torch.zeros_like(data["advantages"])  # (B, R)
                ret = torch.zeros_like(data["advantages"])  # (B, R)
                for row, s in enumerate(mb):
                    old[row, : len(s.values)] = torch.tensor(s.values)
                    ret[row, : len(s.returns)] = torch.tensor(s.returns)
                loss, m = value_loss(
                    self._forward(data), ret, old, data["response_mask"], cliprange_value=self.cliprange_value,
                    batch=batch, loss_agg_mode=self.loss_agg_mode,
                )  # fmt: skip
                loss.backward()
                mb_tokens = float(data["response_mask"].sum())
                for k, v in m.items():
                    if k in VALUE_SUMMED_METRICS:
                        sums[k] += v
                    else:
                        weighted[k] += v * mb_tokens
        finally:
            self.model.eval()
        metrics.update({k: float(v) for k, v in sums.items()})
        metrics.update({k: float(v) / n_tokens for k, v in weighted.items()})
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.optim.grad_clip)
        metrics["train/critic/grad_norm"] = float(grad_norm)
        if torch.isfinite(grad_norm):
            self.optimizer.step()
            self.steps += 1
            metrics["train/critic/skipped_step"] = 0.0
        else:
            metrics["train/critic/skipped_step"] = 1.0
        self.optimizer.zero_grad(set_to_none=True)
        metrics["train/critic/update_s"] = time.perf_counter() - t0
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """Optimizer state and step count (the value model's weights are saved separately, in HF format)."""
        return {"optimizer": self.optimizer.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])
