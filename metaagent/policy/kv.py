"""The decode loop's keys and values, and its attention, on transformers' public attention interface.

The ``hf`` backend calls the model without a transformers cache (``past_key_values=None``, ``use_cache=False``)
and with a ready 4-D attention mask, which transformers' mask builder passes through unchanged. Attention is
:func:`decode_attention`, registered under :data:`DECODE_ATTENTION` with ``transformers.AttentionInterface``
(the extension point that vLLM and TGI use) and selected with ``model.set_attn_implementation``. Inside a
decode-loop forward (:meth:`KVStore.forward`) it receives the new tokens' keys and values of layer
``module.layer_idx`` (after RoPE), writes them into the :class:`KVStore` in place and attends over all the
store holds; outside one (training, reference passes, ``model.generate``) it is transformers' own ``sdpa``.
Nothing here subclasses or reads transformers' cache classes (their constructors changed in 5.17, which broke
the cache-layer subclass this module held before), so the loop runs on every release that keeps
``AttentionInterface`` and 4-D masks (tested: the pinned 5.10 and 5.23).

- :class:`KVStore`: per layer a buffer ``(n, kv_heads, capacity, head_dim)`` with spare columns: a step writes
  one column in place (no ``torch.cat`` of the whole cache, O(S) per token), and the grouped key/value heads
  are read as they are (no ``repeat_kv`` copy per layer). Rows leave (:meth:`~KVStore.select`), leading
  padding columns are dropped (:meth:`~KVStore.trim`) and batches merge (:meth:`~KVStore.merge`) by copies
  at those events only. Column ``j`` of row ``i`` holds the token at position ``positions[i, j]`` when
  ``valid[i, j]``; invalid columns (left padding) are masked out and hold zeros or finite values.
- Attention of one new token (decode) is two matmuls on the grouped heads, queries ``(n, kv_heads, groups,
  d)`` against keys ``(n, kv_heads, S, d)``, with the softmax in fp32. On CPU in bf16 that is ~9x faster than
  torch's SDPA kernel at one query (0.2 vs 2.8 ms a layer at 8 rows x 450 tokens; fp32 alike), measured in
  ``benchmarks/step.py``'s decode profile. Several new tokens (prefill) go to torch SDPA with a boolean mask.
  Both equal transformers' ``sdpa`` up to float summation order (``tests/policy/test_policy_kv.py``).
- Sliding-window layers (the ``sliding_window`` keyword transformers passes per layer) are masked by position
  distance, ``q_pos - k_pos < window``, which is exact because the store never evicts. Attention variants with
  extra terms (logit soft-capping, attention sinks) are refused with :class:`DecodeAttentionError`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import torch

from .base import PolicyError

#: the attention implementation name registered with transformers
DECODE_ATTENTION = "metaagent_decode"
#: spare columns added when a layer's buffer grows: at least this many, or a quarter of its length
GROW_MIN = 64
#: attention implementations the decode attention replaces (outside the decode loop it is ``sdpa``, which
#: computes what ``eager`` computes)
REPLACEABLE = ("sdpa", "eager")
#: keyword arguments transformers' attention modules pass that change the attention itself (not supported)
UNSUPPORTED_KWARGS = ("softcap", "s_aux", "sinks")

_ACTIVE: contextvars.ContextVar[KVStore | None] = contextvars.ContextVar("metaagent_kv_store", default=None)


class DecodeAttentionError(PolicyError):
    """The model's attention needs something the decode loop does not implement; the message names it."""


class KVStore:
    """Keys and values of the rows of one running batch, written in place (see the module docstring).

    Shapes: ``valid`` and ``positions`` are (n, S) for the S columns in use; layer ``l``'s keys and values are
    views (n, kv_heads, S, head_dim) of its buffer.
    """

    def __init__(self) -> None:
        self._k: dict[int, torch.Tensor] = {}  # layer -> (n, kv_heads, capacity, head_dim)
        self._v: dict[int, torch.Tensor] = {}
        self.valid: torch.Tensor | None = None  # (n, S) bool
        self.positions: torch.Tensor | None = None  # (n, S) long
        self._new = 0  # columns being written by the forward in progress
        self._masks: dict[Any, torch.Tensor] = {}

    @property
    def length(self) -> int:
        """Columns in use (S)."""
        return 0 if self.valid is None else self.valid.shape[1]

    @property
    def rows(self) -> int:
        return 0 if self.valid is None else self.valid.shape[0]

    @property
    def n_layers(self) -> int:
        """Attention layers filled so far (all of the model's after its first forward)."""
        return len(self._k)

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``i``'s keys and values, (n, kv_heads, S, head_dim) views."""
        return self._k[i][:, :, : self.length], self._v[i][:, :, : self.length]

    # ------------------------------------------------------------------------------------------- filling
    def preload(
        self, layers: list[tuple[torch.Tensor, torch.Tensor]], valid: torch.Tensor, positions: torch.Tensor
    ) -> None:
        """Start an empty store from given keys/values per layer (n, kv_heads, S, head_dim), e.g. cached prefixes."""
        assert self.valid is None
        for i, (k, v) in enumerate(layers):  # layer i of the list is the model's attention layer i
            self._k[i], self._v[i] = self._with_room(k, k.shape[2]), self._with_room(v, v.shape[2])
        self.valid, self.positions = valid.bool(), positions.long()

    @contextlib.contextmanager
    def forward(self, valid_new: torch.Tensor, positions_new: torch.Tensor) -> Iterator[None]:
        """A model forward that appends ``q`` columns: ``valid_new`` and ``positions_new`` are (n, q). Builds the
        forward's masks once, makes this store the one :func:`decode_attention` writes to, and commits the new
        columns when the forward returns (a forward that raises leaves the store unusable: drop it)."""
        n, q = valid_new.shape
        old = self.length
        valid = valid_new.bool() if self.valid is None else torch.cat([self.valid, valid_new.bool()], dim=1)
        positions = positions_new.long() if self.positions is None else torch.cat([self.positions, positions_new.long()], dim=1)
        self._new, self._masks = q, {"valid": valid, "positions": positions, "old": old}
        token = _ACTIVE.set(self)
        try:
            yield
        finally:
            _ACTIVE.reset(token)
            self._new, self._masks = 0, {}
        self.valid, self.positions = valid, positions

    def attention_mask(self, q: int) -> torch.Tensor:
        """The 4-D mask handed to the model for a forward of ``q`` new columns (transformers passes a 4-D mask
        through unchanged; :func:`decode_attention` builds its own masks, this one only has to be 4-D)."""
        return torch.ones((self.rows or 1, 1, q, 1), dtype=torch.bool)

    def _mask(self, sliding_window: int | None, q: int) -> torch.Tensor:
        """The forward's mask: (n, 1, 1, S) float bias (0 / -inf) for one new column, else (n, 1, q, S) bool."""
        key = (sliding_window, q)
        m = self._masks
        if key in m:
            return m[key]
        valid, positions, old = m["valid"], m["positions"], m["old"]
        allowed = valid[:, None, :].expand(-1, q, -1)  # (n, q, S)
        if q > 1:  # the new columns are causal among themselves; old ones are visible to every new query
            causal = torch.ones((q, q), dtype=torch.bool, device=valid.device).tril()
            allowed = torch.cat([allowed[:, :, :old], allowed[:, :, old:] & causal], dim=2)
        if sliding_window is not None:
            distance = positions[:, old:, None] - positions[:, None, :]  # (n, q, S) query pos - key pos
            allowed = allowed & (distance < sliding_window)
        if q > 1:  # a padding query sees at least itself, so no row of SDPA is fully masked (NaN-free garbage)
            allowed = allowed.clone()
            allowed[:, :, old:] |= torch.eye(q, dtype=torch.bool, device=valid.device)
            out = allowed[:, None]  # (n, 1, q, S)
        else:
            out = torch.zeros(allowed.shape, dtype=torch.float32, device=valid.device)
            out = out.masked_fill_(~allowed, float("-inf"))[:, None]  # (n, 1, 1, S)
        m[key] = out
        return out

    def attend(
        self,
        layer: int,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        scaling: float | None,
        sliding_window: int | None = None,
    ) -> torch.Tensor:
        """Write ``key``/``value`` (n, kv_heads, q, d) of ``layer`` into the store and attend ``query``
        (n, heads, q, d) over every column; returns (n, q, heads, d) like transformers' attention functions."""
        q = self._new
        if key.shape[2] != q:
            raise DecodeAttentionError(f"layer {layer} produced {key.shape[2]} new keys, the forward announced {q}")
        old = self.length
        total = old + q
        k_buf, v_buf = self._k.get(layer), self._v.get(layer)
        if k_buf is None or k_buf.shape[2] < total:
            k_buf = self._k[layer] = self._grow(k_buf, old, total, key)
            v_buf = self._v[layer] = self._grow(v_buf, old, total, value)
        k_buf[:, :, old:total] = key
        v_buf[:, :, old:total] = value
        keys, values = k_buf[:, :, :total], v_buf[:, :, :total]  # (n, kv_heads, S, d)
        mask = self._mask(sliding_window, q)
        n, heads, _, d = query.shape
        kv_heads = keys.shape[1]
        if q == 1:  # decode: grouped heads, two matmuls, fp32 softmax
            groups = heads // kv_heads
            qg = query.reshape(n, kv_heads, groups, d)
            scores = torch.matmul(qg, keys.transpose(-1, -2)).float()  # (n, kv_heads, groups, S)
            scores = scores * (scaling if scaling is not None else d**-0.5) + mask
            probs = torch.softmax(scores, dim=-1).to(values.dtype)
            out = torch.matmul(probs, values).reshape(n, heads, 1, d)
        else:
            out = torch.nn.functional.scaled_dot_product_attention(
                query, keys, values, attn_mask=mask, scale=scaling, enable_gqa=kv_heads != heads
            )  # (n, heads, q, d)
        return out.transpose(1, 2).contiguous()

    def _grow(self, buf: torch.Tensor | None, old: int, total: int, like: torch.Tensor) -> torch.Tensor:
        n, heads, _, dim = like.shape
        new = like.new_zeros((n, heads, total + max(GROW_MIN, total // 4), dim))
        if buf is not None and old:
            new[:, :, :old] = buf[:, :, :old]
        return new

    @staticmethod
    def _with_room(x: torch.Tensor, used: int) -> torch.Tensor:
        """A buffer holding ``x``'s first ``used`` columns, with spare room."""
        n, heads, _, dim = x.shape
        buf = x.new_zeros((n, heads, used + max(GROW_MIN, used // 4), dim))
        buf[:, :, :used] = x[:, :, :used]
        return buf

    # ------------------------------------------------------------------------------------ rows, columns
    def select(self, idx: torch.Tensor) -> None:
        """Keep rows ``idx`` (a copy of each layer's buffer), then drop columns that are padding in every row."""
        for i in self._k:
            self._k[i], self._v[i] = self._k[i][idx], self._v[i][idx]
        self.valid, self.positions = self.valid[idx], self.positions[idx]
        self.trim()

    def trim(self) -> None:
        """Drop leading columns that are padding in every row (views: no copy until the buffer next grows)."""
        used = self.valid.any(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0
        if first == 0:
            return
        for i in self._k:
            self._k[i], self._v[i] = self._k[i][:, :, first:], self._v[i][:, :, first:]
        self.valid, self.positions = self.valid[:, first:], self.positions[:, first:]

    @classmethod
    def merge(cls, a: KVStore, b: KVStore) -> KVStore:
        """``a``'s rows then ``b``'s, both left-padded (invalid zero columns) to the longer one's columns."""
        width = max(a.length, b.length)
        out = cls()
        layers = []
        for i in sorted(a._k):
            ka, va = a.layer(i)
            kb, vb = b.layer(i)
            k = torch.cat([left_pad(ka, width), left_pad(kb, width)], dim=0)
            v = torch.cat([left_pad(va, width), left_pad(vb, width)], dim=0)
            layers.append((k, v))
        valid = torch.cat([left_pad(a.valid, width, dim=1), left_pad(b.valid, width, dim=1)])
        positions = torch.cat([left_pad(a.positions, width, dim=1), left_pad(b.positions, width, dim=1)])
        out.preload(layers, valid, positions)
        return out


def left_pad(x: torch.Tensor, width: int, dim: int = 2) -> torch.Tensor:
    """Left-pad ``x`` with zeros (False) along ``dim`` to ``width``."""
    missing = width - x.shape[dim]
    if missing == 0:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return torch.cat([x.new_zeros(shape), x], dim=dim)


def decode_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The registered attention: the active :class:`KVStore`'s (module docstring), else transformers' ``sdpa``.

    Shapes: query (n, heads, q, head_dim), key/value (n, kv_heads, q or S, head_dim); returns (n, q, heads, head_dim).
    """
    store = _ACTIVE.get()
    if store is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    extra = [k for k in UNSUPPORTED_KWARGS if kwargs.get(k) is not None]
    if extra:
        raise DecodeAttentionError(
            f"{type(module).__name__} passes {extra} to its attention, which the hf backend's decode loop does not "
            "implement; serve this model with the vllm backend"
        )
    layer = getattr(module, "layer_idx", None)
    if layer is None:
        raise DecodeAttentionError(f"{type(module).__name__} has no layer_idx; the decode loop needs one per attention layer")
    return store.attend(layer, query, key, value, scaling, kwargs.get("sliding_window")), None


def use_decode_attention(model: Any) -> None:
    """Switch ``model`` to :func:`decode_attention` (registered once; the mask builder stays ``sdpa``'s, for the
    training forwards that run outside the decode loop). Raises :class:`DecodeAttentionError` for a model whose
    attention is neither ``sdpa`` nor ``eager`` (which ``sdpa`` computes alike)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current == DECODE_ATTENTION:
        return
    if current not in REPLACEABLE:
        raise DecodeAttentionError(
            f"the hf backend decodes with its own attention, whose forwards outside the decode loop are "
            f"transformers' 'sdpa', but the model uses {current!r}; load it with attn_implementation='sdpa'"
        )
    AttentionInterface.register(DECODE_ATTENTION, decode_attention)
    AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)
    model.set_attn_implementation(DECODE_ATTENTION)
