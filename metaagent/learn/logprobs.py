"""Token log-probs of response tokens under a causal LM, without ever holding the B x T x V logits.

The trainer needs ``log pi_theta(o_t | c, o_<t)`` of every response token under the distribution the
rollout sampled from, ``softmax(logits / T)`` with the sample's own temperature ``T`` (designer and
executor may sample at different temperatures; see :mod:`metaagent.policy.base`). The naive way
materialises logits for every position of every sequence (B x L x V floats, plus the same again for
``log_softmax`` and for their gradients): with V = 49k and L = 4k that is several GiB per sequence.

:func:`response_logprobs` instead

1. runs the decoder body once to the final hidden states, shape (B, L, H);
2. selects the hidden state that predicts each *response* token (prompt positions and padding never reach
   the LM head), shape (N, H) with N = number of response tokens in the batch;
3. applies the LM head, temperature, ``logsumexp`` and ``gather`` (:mod:`metaagent.policy.logsoftmax`) to
   chunks of ``chunk_size`` rows; each chunk runs under ``torch.utils.checkpoint`` so the backward pass
   recomputes one chunk's logits at a time instead of keeping all of them. Peak extra memory: ``chunk_size x V`` floats (a few of them).

The batch is the dict of :func:`metaagent.learn.samples.collate` (right padding): ``input_ids``,
``attention_mask``, ``position_ids`` (B, L); ``response_index``, ``responses``, ``response_mask`` (B, R);
``temperatures`` (B,). ``response_index[b, t]`` is the position whose hidden state predicts
``responses[b, t]`` (the position just before that token).

Supported heads: a plain (optionally tied) LM head, Cohere-style ``config.logit_scale`` and Gemma-style
``config.final_logit_softcapping``; other logit post-processing would need adding to ``_head_logits``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from metaagent.errors import MetaAgentError
from metaagent.policy.logsoftmax import log_softmax, token_logprobs

DEFAULT_CHUNK_SIZE = 256  # rows x vocab fp32 logits per chunk: 256 x 49k x 4 B = 48 MiB

BATCH_KEYS = (
    "input_ids",
    "attention_mask",
    "position_ids",
    "response_index",
    "responses",
    "response_mask",
    "temperatures",
)


class LogprobError(MetaAgentError, ValueError):
    """The model or batch cannot be used for log-prob computation; the message says why."""


def _parts(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module, float | None, float | None]:
    """(decoder body, LM head, logit_scale, softcap) of a Hugging Face causal LM."""
    get_decoder = getattr(model, "get_decoder", None)
    body = get_decoder() if callable(get_decoder) else getattr(model, "base_model", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if body is None or body is model or head is None:
        raise LogprobError(
            f"{type(model).__name__} is not a Hugging Face causal LM with a separate decoder and LM head "
            "(need model.get_decoder() and model.get_output_embeddings())"
        )
    config = getattr(model, "config", None)
    scale = getattr(config, "logit_scale", None)
    softcap = getattr(config, "final_logit_softcapping", None)
    return body, head, (float(scale) if scale else None), (float(softcap) if softcap else None)


def _check_batch(batch: Mapping[str, torch.Tensor]) -> None:
    missing = [k for k in BATCH_KEYS if k not in batch]
    if missing:
        raise LogprobError(f"batch is missing {missing}; build it with metaagent.learn.samples.collate")
    if (batch["temperatures"] <= 0).any():
        raise LogprobError(
            "temperatures must be > 0 (use 1.0 for greedy samples: their log-probs are of softmax(logits))"
        )


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """Half-precision logits to fp32 for the log-softmax; fp32/fp64 stay as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _head_logits(
    head: torch.nn.Module, h: torch.Tensor, scale: float | None, softcap: float | None
) -> torch.Tensor:
    logits = _upcast(head(h))  # (C, V) at least fp32, also under bf16 autocast
    if scale is not None:
        logits = logits * scale
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    return logits


def _chunk_logprobs(
    h: torch.Tensor,  # (C, H)
    targets: torch.Tensor,  # (C,)
    temp: torch.Tensor,  # (C,)
    head: torch.nn.Module,
    scale: float | None,
    softcap: float | None,
    with_entropy: bool,
    entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = _head_logits(head, h, scale, softcap)  # (C, V)
    logits = logits / temp.to(logits.dtype)[:, None]  # softmax(logits / T): the rollout's distribution
    logp, logz = token_logprobs(logits, targets)  # (C,), (C,)
    if not with_entropy:
        return logp, logp.new_zeros(())
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        src, lz = (logits, logz) if entropy_grad else (logits.detach(), logz.detach())
        entropy = lz - (torch.exp(src - lz[:, None]) * src).sum(-1)  # (C,)  H = logZ - E_p[logit]
    return logp, entropy


def chunked_logprobs(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: torch.Tensor,
    head: torch.nn.Module,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    use_checkpoint: bool = True,
    logit_scale: float | None = None,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log softmax(head(hidden) / T)[target]`` row by row, in chunks of ``chunk_size`` rows.

    Args:
        hidden: (N, H) hidden states, one per predicted token.
        targets: (N,) token ids.
        temperature: (N,) sampling temperature of each row (> 0).
        head: the LM head (hidden -> vocabulary logits).
        with_entropy: also return the entropy of each row's distribution; with ``entropy_grad`` it is
            differentiable (for an entropy bonus), otherwise detached (for logging).
        use_checkpoint: recompute each chunk's logits in backward instead of storing them.

    Returns:
        ``(logp (N,), entropy (N,) or None)``, fp32.
    """
    if chunk_size < 1:
        raise LogprobError(f"chunk_size must be >= 1, got {chunk_size}")
    n = hidden.shape[0]
    if n == 0:
        empty = hidden.new_zeros((0,), dtype=torch.float32)
        return empty, (empty.clone() if with_entropy else None)
    grad = torch.is_grad_enabled() and use_checkpoint
    logps, ents = [], []
    for s in range(0, n, chunk_size):
        args = (hidden[s : s + chunk_size], targets[s : s + chunk_size], temperature[s : s + chunk_size])
        extra = (head, logit_scale, softcap, with_entropy, entropy_grad)
        if grad:
            lp, ent = checkpoint(_chunk_logprobs, *args, *extra, use_reentrant=False)
        else:
            lp, ent = _chunk_logprobs(*args, *extra)
        logps.append(lp)
        ents.append(ent)
    logp = torch.cat(logps)  # (N,)
    return logp, (torch.cat(ents) if with_entropy else None)


def hidden_states(model: torch.nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Final hidden states (after the last norm) of every position, shape (B, L, H)."""
    body, _, _, _ = _parts(model)
    out = body(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
    )
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def _scatter(values: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    out = values.new_zeros(shape)  # (B, R)
    return out.index_put((rows, cols), values)  # out of place: gradients flow to values


def response_logprobs(
    model: torch.nn.Module,
    batch: Mapping[str, Any],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    use_checkpoint: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and optionally entropies) of the batch's response tokens, chunked (module docstring).

    Returns:
        ``(logp (B, R), entropy (B, R) or None)``, fp32, 0 where ``response_mask`` is 0.
    """
    _check_batch(batch)
    _, head, scale, softcap = _parts(model)
    hidden = hidden_states(model, batch)  # (B, L, H)
    mask = batch["response_mask"].bool()  # (B, R)
    rows, cols = mask.nonzero(as_tuple=True)  # (N,), (N,)
    h = hidden[rows, batch["response_index"][rows, cols]]  # (N, H)
    targets = batch["responses"][rows, cols]  # (N,)
    temps = batch["temperatures"][rows]  # (N,)
    logp, ent = chunked_logprobs(
        h,
        targets,
        temps,
        head,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
        entropy_grad=entropy_grad,
        use_checkpoint=use_checkpoint,
        logit_scale=scale,
        softcap=softcap,
    )
    logp_bt = _scatter(logp, rows, cols, mask.shape)  # (B, R)
    ent_bt = _scatter(ent, rows, cols, mask.shape) if ent is not None else None  # (B, R)
    return logp_bt, ent_bt


def naive_response_logprobs(
    model: torch.nn.Module, batch: Mapping[str, Any], *, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Reference implementation through the full (B, L, V) logits; same outputs as :func:`response_logprobs`.

    Used by the tests and the benchmark; do not train with it on long sequences.
    """
    _check_batch(batch)
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
    )
    logits = _upcast(out.logits)  # (B, L, V)
    logits = logits / batch["temperatures"].to(logits.dtype)[:, None, None]
    logp_all = log_softmax(logits)  # (B, L, V)
    mask = batch["response_mask"].to(logp_all.dtype)  # (B, R)
    b = torch.arange(logits.shape[0], device=logits.device)[:, None]  # (B, 1)
    idx = batch["response_index"]  # (B, R)
    logp = logp_all[b, idx, batch["responses"]] * mask  # (B, R)
    if not with_entropy:
        return logp, None
    sel = logp_all[b, idx]  # (B, R, V)
    entropy = -(sel.exp() * sel).sum(-1) * mask  # (B, R)
    return logp, entropy
