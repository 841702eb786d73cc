"""The product form of each linear layer while generating on CPU: prepacked bf16 weights, ``W @ h.T``, or
torch's plain ``F.linear``, per CPU kind and dtype as measured (:data:`DECODE_FORMS`).

A decode step multiplies a few rows (the running batch) by every weight matrix of the model, and which way of
writing that product is fastest depends on the CPU kind, the dtype and the shape
(``benchmarks/decode_kernels.py`` measures every form per layer kind,
``benchmarks/results/decode_kernels_<kind>.txt``):

- ``packed`` (bf16): oneDNN with the weight reordered once into its blocked layout
  (``torch.ops.mkldnn._reorder_linear_weight``, the prepacking torch's inductor does when it freezes a CPU
  model) instead of at every call. Measured on the 2-core AMD EPYC (avx512_bf16): one (8 x 576) @ (576 x 1536)
  product 95 -> 61 us, the LM head at 8 rows 2.1x; outputs bit-identical to ``F.linear``'s.
- ``w_ht`` (fp32): ``(W @ h.T).T``, the product the other way round; MKL's small-M ``h @ W.T`` is slow for a
  wide output. The LM head (576 -> 49152) at 8 rows: 60 -> 31 ms on avx512_bf16, 35-50 -> 16.8 ms on AVX2
  (issue #63); 1.56x / 1.75x at 32 rows. The same products summed in another order: within 1e-6 of the largest
  output (relative; the test bounds it), not bit-identical at every row count.
- ``linear``: ``nn.Linear``'s own forward, where nothing else measured faster (fp32 q/k/v/o/MLP at 8 rows).

:func:`install` gives each CPU ``nn.Linear`` of a generation model whose form is not ``linear`` a forward
that, while :func:`packing` is active (the hf backend's generation runs: ``HFPolicy._run``), multiplies in
that form; packed copies are made on first use and made again whenever the weight changed (storage pointer and
in-place version counter: a :class:`~metaagent.policy.precision.DecodeCopy` refresh, an optimizer step).
Outside that block (training forwards, reference log-probs, anything with autograd) it is ``nn.Linear``'s own
forward. :func:`drop` frees the packed copies (with the rollout's other caches, before an update).

Not covered (``nn.Linear``'s path): fp16 weights, GPUs, grad mode, and CPU kinds or dtypes
:data:`DECODE_FORMS` has no measurement for (bf16 there is packed where oneDNN has bf16 kernels,
:func:`supported`; fp32 stays plain).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import types
from collections.abc import Iterator
from typing import Any

from . import precision

#: the attribute a linear layer keeps its packed weight in: ((data_ptr, version), packed tensor)
CACHE = "_metaagent_packed"
#: the attribute a linear layer keeps its decode form in (one of FORMS)
FORM = "_metaagent_form"
#: the product forms (module docstring)
FORMS = ("linear", "w_ht", "packed")
#: measured fastest form per CPU kind (precision.cpu_kind) -> dtype -> layer ("lm_head": the output embedding,
#: "other": every other linear), as benchmarks/decode_kernels.py measured (results/decode_kernels_<kind>.txt)
DECODE_FORMS: dict[str, dict[str, dict[str, str]]] = {
    "avx512_bf16": {"float32": {"lm_head": "w_ht", "other": "linear"},
                    "bfloat16": {"lm_head": "packed", "other": "packed"}},
    # AVX2 (no bf16 units, so fp32): at the default batch's 32 rows W @ h.T is 1.10-1.33x faster on every layer
    # (the model's linears 49% -> 71% of the fp32 peak); at 8 rows it is 3% slower in all, the LM head 2.05x faster
    "AVX2": {"float32": {"lm_head": "w_ht", "other": "w_ht"}},
}  # fmt: skip
#: the form of a (kind, dtype) without a measurement: bf16 packed where supported, else torch's linear
FALLBACK_FORMS = {"bfloat16": "packed"}

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


def decode_form(kind: str, dtype: str, layer: str) -> str:
    """The form (:data:`FORMS`) a ``layer`` (``"lm_head"`` or ``"other"``) of ``dtype`` takes on ``kind``."""
    form = DECODE_FORMS.get(kind, {}).get(dtype, {}).get(layer) or FALLBACK_FORMS.get(dtype, "linear")
    return "linear" if form == "packed" and not supported() else form


def install(model: Any, kind: str | None = None) -> int:
    """Give every CPU ``nn.Linear`` of ``model`` whose :func:`decode_form` (on CPU ``kind``, default this
    one's) is not ``linear`` the decode forward (module docstring); returns how many. Installing twice changes
    nothing."""
    import torch

    kind = kind or precision.cpu_kind()  # looked up at the call (tests set the CPU kind)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    count = 0
    for module in model.modules():
        if type(module) is not torch.nn.Linear or module.weight.device.type != "cpu":
            continue
        dtype = str(module.weight.dtype).removeprefix("torch.")
        form = decode_form(kind, dtype, "lm_head" if module is head else "other")
        if form == "linear":
            continue
        vars(module)[FORM] = form
        if "forward" not in vars(module):
            module.forward = types.MethodType(_forward, module)
        count += 1
    return count


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
    """``nn.Linear.forward``, in the layer's decode form inside :func:`packing` for inputs of its dtype
    without autograd: ``packed`` through the oneDNN weight, ``w_ht`` as ``(W @ h.T).T`` (a transposed view,
    no copy)."""
    import torch

    weight = self.weight
    if (
        not _ACTIVE.get()
        or torch.is_grad_enabled()
        or x.dtype != weight.dtype
        or x.device.type != "cpu"
        or weight.numel() == 0  # released (DecodeCopy.release): let nn.Linear raise its own error
    ):
        return torch.nn.functional.linear(x, weight, self.bias)
    if vars(self)[FORM] == "packed":
        return torch.ops.mkldnn._linear_pointwise(x, _packed(self), self.bias, "none", [], "")
    h = x.reshape(-1, x.shape[-1])  # (N, in)
    out = (weight @ h.T).T  # (N, out), strides (1, N)
    if self.bias is not None:
        out = out + self.bias
    return out.reshape(*x.shape[:-1], weight.shape[0])
