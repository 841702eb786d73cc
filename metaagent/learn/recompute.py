"""What a training forward keeps for backward: everything (``off``), only the matrix products' outputs of each
decoder layer (``selective``), or only each layer's input (``full``).

``selective`` runs every decoder layer under ``torch.utils.checkpoint`` with a selective policy: the outputs of
the ops in :data:`SAVED_OPS` (matrix products and the attention kernel) are kept from the forward, and backward
recomputes the rest of the layer from its input (norms, rotary embedding, activation function, residual adds and
the bf16 casts of autocast). The recomputed ops are the same ops on the same inputs, so gradients equal the
plain forward's (tests/train/test_train_update.py checks it); the cost is the layer's elementwise work once more,
not its matrix products.

Why: under bf16 autocast a decoder layer keeps for backward its fp32 norm intermediates, the bf16 copies of its
inputs that autocast makes for each matrix product, and (through those products) the bf16 copies of its weights;
``micro_batch_tokens: 768`` in ``configs/default.yaml`` records ~1.4 MB a token of SmolLM2-135M for all of it.
With ``selective`` a layer keeps its input and its products' outputs, and the weights' bf16 copies are cast again
layer by layer in backward. ``benchmarks/demo_memory.py`` measures ``make demo``'s peak with and without.
``full`` (recompute whole layers, matrix products too) saves a little more for a whole extra forward.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

RECOMPUTE = ("off", "selective", "full")
Recompute = Literal["off", "selective", "full"]

#: aten ops whose outputs ``selective`` keeps (everything else in a decoder layer is recomputed in backward)
SAVED_OPS = (
    "mm", "addmm", "bmm", "baddbmm",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
)  # fmt: skip


@functools.cache
def _saved_ops() -> frozenset[Any]:
    import torch

    return frozenset(getattr(torch.ops.aten, name).default for name in SAVED_OPS if hasattr(torch.ops.aten, name))


def _selective_contexts() -> Any:
    """The forward/recompute contexts of one checkpointed layer call; the policy runs for every op, so it only
    looks up a set."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    saved, keep, redo = _saved_ops(), CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(lambda ctx, op, *args, **kwargs: keep if op in saved else redo)


def enable_recompute(model: Any, mode: Recompute) -> None:
    """Set ``model``'s (a Hugging Face model's) decoder layers to ``mode`` (module docstring); in train mode only,
    so generation and ``no_grad`` forwards of the same model are unaffected."""
    if mode not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {mode!r}")
    if mode == "off":
        if getattr(model, "is_gradient_checkpointing", False):
            model.gradient_checkpointing_disable()
        return
    kwargs: dict[str, Any] = {"use_reentrant": False}
    if mode == "selective":
        kwargs["context_fn"] = _selective_contexts
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
