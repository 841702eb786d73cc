"""Prepacked bf16 linear weights for generation on CPU.

A decode step multiplies a few rows (the running batch) by every weight matrix of the model, so on CPU its
time goes to oneDNN reordering each bf16 weight into its blocked layout, again at every call: measured on the
2-core AMD EPYC (avx512_bf16), one (8 x 576) @ (576 x 1536) product takes 95 us through ``F.linear`` and 61 us
with the weight reordered once (``torch.ops.mkldnn._reorder_linear_weight``, the prepacking torch's inductor
does when it freezes a CPU model), 1.5-2x at 1-13 rows, parity from ~64 rows on, and bit-identical outputs
(``benchmarks/step.py`` measures the whole decode).

:func:`install` gives each bf16 ``nn.Linear`` of a generation model a forward that, while :func:`packing` is
active (the hf backend's generation runs: ``HFPolicy._run``), multiplies by a packed copy of its weight, made
on first use and made again whenever the weight changed (storage pointer and in-place version counter: a
:class:`~metaagent.policy.precision.DecodeCopy` refresh, an optimizer step); outside that block (training
forwards, reference log-probs, anything with autograd) it is ``nn.Linear``'s own forward. :func:`drop` frees
the packed copies (with the rollout's other caches, before an update).

Covered: bf16 weights and inputs on a CPU whose oneDNN has bf16 kernels (:func:`supported`), with or without
bias, any number of leading input dimensions. Not covered (``nn.Linear``'s path): fp32 and fp16 weights (MKL's
packed fp32 GEMM measured 1.0-1.2x here, not worth a second copy), GPUs, and grad mode.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import types
from collections.abc import Iterator
from typing import Any

#: the attribute a linear layer keeps its packed weight in: ((data_ptr, version), packed tensor)
CACHE = "_metaagent_packed"

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("metaagent_packing", default=False)


@functools.cache
def supported() -> bool:
    """Whether this torch build can prepack bf16 linear weights for CPU (oneDNN with bf16 kernels)."""
    import torch

    ops = torch.ops.mkldnn
    try:
        return bool(
            torch.backends.mkldnn.is_available()
            and ops._is_mkldnn_bf16_supported()
            and hasattr(ops, "_reorder_linear_weight")
            and hasattr(ops, "_linear_pointwise")
        )
    except (AttributeError, RuntimeError):
        return False


@contextlib.contextmanager
def packing() -> Iterator[None]:
    """Linear layers given :func:`install` use their packed weights until the block ends (this thread only)."""
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def install(model: Any) -> int:
    """Give every bf16 CPU ``nn.Linear`` of ``model`` the packed forward (module docstring); returns how many.

    Nothing is installed where :func:`supported` is False; installing twice changes nothing."""
    import torch

    if not supported():
        return 0
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    mine = [m for m in linears if m.weight.dtype == torch.bfloat16 and m.weight.device.type == "cpu"]
    for module in mine:
        if "forward" not in vars(module):
            module.forward = types.MethodType(_forward, module)
    return len(mine)


def drop(model: Any) -> None:
    """Free the packed weights of ``model``'s linear layers (made again at their next packed forward)."""
    for module in model.modules():
        vars(module).pop(CACHE, None)


def _packed(module: Any) -> Any:
    """The module's weight packed for oneDNN, made now if the weight changed since it was packed."""
    import torch

    weight = module.weight
    key = (weight.data_ptr(), weight._version, tuple(weight.shape))
    cached = vars(module).get(CACHE)
    if cached is None or cached[0] != key:
        with torch.no_grad():
            cached = (key, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1))
        vars(module)[CACHE] = cached
    return cached[1]


def _forward(self: Any, x: Any) -> Any:
    """``nn.Linear.forward``, through the packed weight inside :func:`packing` for bf16 inputs without autograd."""
    import torch

    weight = self.weight
    if (
        not _ACTIVE.get()
        or torch.is_grad_enabled()
        or x.dtype != weight.dtype
        or weight.dtype != torch.bfloat16
        or x.device.type != "cpu"
        or weight.numel() == 0  # released (DecodeCopy.release): let nn.Linear raise its own error
    ):
        return torch.nn.functional.linear(x, weight, self.bias)
    return torch.ops.mkldnn._linear_pointwise(x, _packed(self), self.bias, "none", [], "")
