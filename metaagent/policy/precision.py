"""Where generation and training run in bf16: the hardware check, what ``"auto"`` resolves to, and the
rollout's bf16 copy of fp32 master weights.

- :func:`bf16_supported`: the device multiplies bf16 matrices natively. CPU: the ``avx512_bf16`` or
  ``amx_bf16`` flag in ``/proc/cpuinfo`` (Linux; elsewhere False: torch would emulate bf16, slower than
  fp32); CUDA: ``torch.cuda.is_bf16_supported()``. On the 2-core AMD EPYC (Zen 5, ``avx512_bf16``) this
  project is measured on, a 1024^3 matmul runs ~4x faster in bf16 than in fp32 (``benchmarks/step.py``).
- :func:`resolve_dtype`: ``"auto"`` -> ``"bfloat16"`` where supported, else ``"float32"``.
- :class:`DecodeCopy`: generation in a lower precision than the trained model's fp32 master weights (the GPU
  recipe's bf16 vLLM beside an fp32 FSDP actor): a copy of the model with every parameter cast, refreshed from
  the master whenever the master's parameters changed (storage pointer and in-place version counter of every
  parameter, :func:`~metaagent.policy.prefix_cache.weights_fingerprint`: optimizer steps, ``load_state_dict``).
  Buffers (rotary frequencies) keep their dtype; tied parameters stay tied.

The log-probs the rollout records then come from the bf16 copy while the trainer recomputes them with the fp32
master (under bf16 autocast): the mismatch the trainer measures (``train/mismatch_kl``) and corrects with
truncated importance sampling (``optim.tis_cap``, :func:`metaagent.learn.losses.tis_weights`).
"""

from __future__ import annotations

import copy
import functools
import os
from typing import Any

from .prefix_cache import weights_fingerprint

#: the dtypes models load in
LOAD_DTYPES = ("float32", "bfloat16", "float16")
#: dtype names a policy accepts (``"auto"``: :func:`resolve_dtype`)
DTYPES = ("auto", *LOAD_DTYPES)
#: /proc/cpuinfo flags of native bf16 matrix arithmetic (AVX-512 BF16 dot products, AMX tiles)
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


#: CPU kinds by their /proc/cpuinfo flags, first match wins (decode forms and update defaults are per kind)
CPU_KINDS = (("AMX", "amx_bf16"), ("avx512_bf16", "avx512_bf16"), ("AVX2", "avx2"))
#: ``METAAGENT_CPU_KIND=<kind>`` makes the project choose as on a slower kind of :data:`CPU_KINDS` (the flags of
#: the kinds above it are hidden: ``auto`` dtypes, decode forms, update defaults). With torch's own
#: ``ATEN_CPU_CAPABILITY=avx2`` and ``ONEDNN_MAX_CPU_ISA=AVX2`` the kernels follow too: a stand-in for timing the
#: AVX2 kind on a faster CPU (clock and caches still differ: a proxy, named as such beside its figures)
CPU_KIND_ENV = "METAAGENT_CPU_KIND"


@functools.cache
def _cpu_flags() -> frozenset[str]:
    flags: frozenset[str] = frozenset()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = frozenset(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    wanted = os.environ.get(CPU_KIND_ENV)
    if wanted:
        kinds = [k for k, _ in CPU_KINDS]
        if wanted not in kinds:
            raise ValueError(f"${CPU_KIND_ENV}={wanted!r}: give one of {kinds}, or unset it")
        hidden = {flag for kind, flag in CPU_KINDS[: kinds.index(wanted)]}
        flags = flags - hidden - ({"avx512_bf16", "amx_bf16"} if wanted == "AVX2" else set())
    return flags


def cpu_kind() -> str:
    """This CPU's kind as the project's measurements name it (:data:`CPU_KINDS`): ``"AMX"``,
    ``"avx512_bf16"``, ``"AVX2"``, or ``"other"`` (no flags read: not Linux, or an older x86)."""
    flags = _cpu_flags()
    return next((kind for kind, flag in CPU_KINDS if flag in flags), "other")


def bf16_supported(device: str = "cpu") -> bool:
    """Whether ``device`` multiplies bf16 matrices natively (module docstring)."""
    kind = str(device).split(":", 1)[0]  # "cuda:0" -> "cuda"; a string test, so a CPU config imports no torch
    if kind == "cuda":
        import torch

        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if kind == "cpu":
        return any(flag in _cpu_flags() for flag in BF16_CPU_FLAGS)
    return False


def resolve_dtype(dtype: str, device: str = "cpu") -> str:
    """``dtype`` itself, or for ``"auto"`` ``"bfloat16"`` where :func:`bf16_supported` else ``"float32"``."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype == "auto":
        return "bfloat16" if bf16_supported(device) else "float32"
    return dtype


class DecodeCopy:
    """A copy of ``master`` with its parameters in ``dtype``, kept equal to ``master.to(dtype)``.

    Call :meth:`model` before each use: it refreshes the copy when the master's weights changed.
    """

    def __init__(self, master: Any, dtype: Any) -> None:
        import torch

        memo = {
            id(p): torch.nn.Parameter(p.detach().to(dtype), requires_grad=False) for p in master.parameters()
        }  # deepcopy takes these instead of copying the fp32 tensors: tied parameters stay one parameter
        self._copy = copy.deepcopy(master, memo)
        self._copy.eval()
        self._master = master
        self._fingerprint = weights_fingerprint(master)
        self.syncs = 0  # refreshes since construction

    def model(self) -> Any:
        """The low-precision copy, refreshed first if the master's parameters changed (or were released)."""
        import torch

        fp = weights_fingerprint(self._master)
        if fp != self._fingerprint:
            with torch.no_grad():
                for mine, theirs in zip(self._copy.parameters(), self._master.parameters(), strict=True):
                    if mine.shape == theirs.shape:
                        mine.copy_(theirs)  # cast in place
                    else:  # released: a new cast
                        mine.data = theirs.detach().to(mine.dtype)
            self._fingerprint = fp
            self.syncs += 1
        return self._copy

    @property
    def held(self) -> Any:
        """The copy as it is now, without refreshing it (to free what hangs on it)."""
        return self._copy

    def release(self) -> None:
        """Free the copy's weights until the next :meth:`model` (e.g. while the master is being trained: the
        update changes them anyway); :meth:`model` casts them again."""
        for p in self._copy.parameters():
            p.data = p.data.new_empty(0)
        self._fingerprint = None
