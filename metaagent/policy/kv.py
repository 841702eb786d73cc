"""The decode loop's keys and values, and its attention, on transformers' public attention interface.

The ``hf`` backend calls the model without a transformers cache (``past_key_values=None``, ``use_cache=False``)
and with a ready 4-D attention mask, which transformers' mask builder passes through unchanged. Attention is
:func:`decode_attention`, registered under :data:`DECODE_ATTENTION` with ``transformers.AttentionInterface``
(the extension point that vLLM and TGI use) and selected with ``model.set_attn_implementation``. Inside a
decode-loop forward (``store.forward(...)``) it receives the new tokens' keys and values of layer
``module.layer_idx`` (after RoPE), writes them into the active store in place and attends over all the store
holds; outside one (training, reference passes, ``model.generate``) it is transformers' own ``sdpa``. Nothing
here subclasses or reads transformers' cache classes (their constructors changed in 5.17, which broke the
cache-layer subclass this module held before), so the loop runs on every release that keeps
``AttentionInterface`` and 4-D masks (tested: the pinned 5.10 and 5.23).

Two stores:

- :class:`PromptKV`: one prefill. Rows left-padded to a common width (optionally after cached prefixes,
  :meth:`~PromptKV.preload`); column ``j`` of row ``i`` holds position ``positions[i, j]`` where ``valid[i, j]``.
- :class:`KVStore`: the running batch, one slot per row: per layer a buffer ``(rows, kv_heads, capacity,
  head_dim)`` in which row ``i``'s token at position ``p`` sits in column ``p`` (no padding columns), ``lengths``
  tokens per row. A decode step writes one column per row in place; a row that finishes is replaced by the
  last row (one row copied, :meth:`~KVStore.keep`); admitted rows are copied into free slots
  (:meth:`~KVStore.extend`). Nothing copies the whole batch except a buffer growing (columns in steps of at
  least :data:`GROW_MIN`).

Attention of one new token (decode) is two matmuls on the grouped heads, queries ``(n, kv_heads, groups, d)``
against the contiguous buffer ``(n, kv_heads, capacity, d)`` (columns past a row's length masked), softmax in
fp32. On CPU in bf16 that is ~9x faster than torch's SDPA kernel at one query, and reading the whole buffer is
~5x faster than a column slice of it, which bf16 matmuls copy first (measured in ``benchmarks/step.py``'s decode
profile). Several new tokens (prefill) go to torch SDPA with a boolean mask. Both equal transformers' ``sdpa``
up to float summation order (``tests/policy/test_policy_kv.py``). Sliding-window layers (the ``sliding_window``
keyword transformers passes per layer) are masked by position distance, ``q_pos - k_pos < window``, exact
because nothing is evicted. Attention variants with extra terms (logit soft-capping, attention sinks) are
refused with :class:`DecodeAttentionError`.
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
#: attention implementations the decode attention replaces (outside the decode loop it is ``sdpa``, which
#: computes what ``eager`` computes)
REPLACEABLE = ("sdpa", "eager")
#: keyword arguments transformers' attention modules pass that change the attention itself (not supported)
UNSUPPORTED_KWARGS = ("softcap", "s_aux", "sinks")
#: spare columns added when a running batch's buffer grows: at least this many, or an eighth of its length
GROW_MIN = 32

_ACTIVE: contextvars.ContextVar[Any] = contextvars.ContextVar("metaagent_kv_store", default=None)


@contextlib.contextmanager
def _active(store: Any, plan: dict[str, Any]) -> Iterator[None]:
    """``store`` is the one :func:`decode_attention` writes to, with this forward's ``plan``, until the block ends."""
    store._plan = plan
    token = _ACTIVE.set(store)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        store._plan = {}


class DecodeAttentionError(PolicyError):
    """The model's attention needs something the decode loop does not implement; the message names it."""


def _attend(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scaling: float | None):
    """query (n, heads, q, d) over keys/values (n, kv_heads, S, d): (n, q, heads, d). ``mask``: for q = 1 a float
    bias (n, 1, 1, S) (0 or -inf), else a boolean (n, 1, q, S)."""
    n, heads, q, d = query.shape
    kv_heads = keys.shape[1]
    if q == 1:  # decode: grouped heads, two matmuls, fp32 softmax
        qg = query.reshape(n, kv_heads, heads // kv_heads, d)
        scores = torch.matmul(qg, keys.transpose(-1, -2)).float()  # (n, kv_heads, groups, S)
        scores = scores * (scaling if scaling is not None else d**-0.5) + mask
        probs = torch.softmax(scores, dim=-1).to(values.dtype)
        out = torch.matmul(probs, values).reshape(n, heads, 1, d)
    else:
        out = torch.nn.functional.scaled_dot_product_attention(
            query, keys, values, attn_mask=mask, scale=scaling, enable_gqa=kv_heads != heads
        )  # (n, heads, q, d)
    return out.transpose(1, 2).contiguous()


def _bias(allowed: torch.Tensor) -> torch.Tensor:
    """(n, S) allowed columns -> (n, 1, 1, S) float bias, 0 where allowed, -inf elsewhere."""
    bias = torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device)
    return bias.masked_fill_(~allowed, float("-inf"))[:, None, None, :]


class PromptKV:
    """Keys and values of one prefill: rows left-padded to a common width (module docstring).

    Shapes: ``valid`` and ``positions`` are (n, S); layer ``l``'s keys and values are (n, kv_heads, S, head_dim).
    """

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.valid: torch.Tensor | None = None  # (n, S) bool
        self.positions: torch.Tensor | None = None  # (n, S) long
        self._plan: dict[Any, Any] = {}

    @property
    def n_layers(self) -> int:
        return len(self.keys)

    def preload(
        self, layers: list[tuple[torch.Tensor, torch.Tensor]], valid: torch.Tensor, positions: torch.Tensor
    ) -> None:
        """Start from given keys/values of attention layers 0, 1, ... (n, kv_heads, S, head_dim), e.g. cached prefixes."""
        for i, (k, v) in enumerate(layers):
            self.keys[i], self.values[i] = k, v
        self.valid, self.positions = valid.bool(), positions.long()

    @contextlib.contextmanager
    def forward(self, valid_new: torch.Tensor, positions_new: torch.Tensor) -> Iterator[None]:
        """A model forward appending ``q`` columns (``valid_new``, ``positions_new``: (n, q)): this store is the one
        :func:`decode_attention` writes to until it returns."""
        old = 0 if self.valid is None else self.valid.shape[1]
        cat = lambda a, b: b if a is None else torch.cat([a, b], dim=1)  # noqa: E731
        valid, positions = cat(self.valid, valid_new.bool()), cat(self.positions, positions_new.long())
        with _active(self, {"old": old, "valid": valid, "positions": positions}):
            yield
        self.valid, self.positions = valid, positions

    def _mask(self, sliding_window: int | None) -> torch.Tensor:
        plan = self._plan
        if sliding_window in plan:
            return plan[sliding_window]
        valid, positions, old = plan["valid"], plan["positions"], plan["old"]
        q = valid.shape[1] - old
        allowed = valid[:, None, :].expand(-1, q, -1)  # (n, q, S)
        causal = torch.ones((q, q), dtype=torch.bool, device=valid.device).tril()
        allowed = torch.cat([allowed[:, :, :old], allowed[:, :, old:] & causal], dim=2)
        if sliding_window is not None:
            allowed = allowed & (positions[:, old:, None] - positions[:, None, :] < sliding_window)
        if q == 1:
            mask = _bias(allowed[:, 0])
        else:  # a padding query sees at least itself: no fully masked SDPA row (finite garbage, never read)
            allowed = allowed.clone()
            allowed[:, :, old:] |= torch.eye(q, dtype=torch.bool, device=valid.device)
            mask = allowed[:, None]  # (n, 1, q, S)
        plan[sliding_window] = mask
        return mask

    def attend(self, layer: int, query, key, value, scaling: float | None, sliding_window: int | None = None):
        """Append ``key``/``value`` (n, kv_heads, q, d) to ``layer`` and attend ``query`` (n, heads, q, d)."""
        if layer in self.keys:
            key = torch.cat([self.keys[layer], key], dim=2)
            value = torch.cat([self.values[layer], value], dim=2)
        self.keys[layer], self.values[layer] = key, value
        return _attend(query, key, value, self._mask(sliding_window), scaling)

    def row(self, i: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row ``i``'s keys and values at ``layer`` in position order, without padding: (kv_heads, len_i, d)."""
        cols = self.valid[i]
        return self.keys[layer][i][:, cols], self.values[layer][i][:, cols]


class KVStore:
    """The running batch's keys and values, one slot per row (module docstring).

    Shapes: ``lengths`` (n,) tokens cached per row (the next token's position); layer buffers
    ``(rows, kv_heads, capacity, head_dim)`` with ``rows >= n``.
    """

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.lengths = torch.zeros(0, dtype=torch.long)
        self._plan: dict[Any, Any] = {}

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def capacity(self) -> int:
        return next(iter(self.keys.values())).shape[2] if self.keys else 0

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``i``'s buffers of the live rows: (n, kv_heads, capacity, head_dim); row ``r`` is valid in
        columns ``< lengths[r]``."""
        return self.keys[i][: self.rows], self.values[i][: self.rows]

    def _resize(self, rows: int, capacity: int) -> None:
        """Move every layer into buffers of ``rows`` x ``capacity`` (zeros where nothing is held)."""
        n, used = self.rows, int(self.lengths.max()) if self.rows else 0
        for store in (self.keys, self.values):
            for i, buf in store.items():
                new = buf.new_zeros((rows, buf.shape[1], capacity, buf.shape[3]))
                new[:n, :, :used] = buf[:n, :, :used]
                store[i] = new

    def extend(self, prompt: PromptKV) -> None:
        """Copy every row of ``prompt`` (after its prefill) into new slots, without its padding."""
        m = prompt.valid.shape[0]
        lengths = prompt.valid.sum(dim=1).to(self.lengths.device)  # (m,)
        n = self.rows
        need_cols = int(lengths.max())
        if not self.keys:
            k0 = prompt.keys[0]
            for store, src in ((self.keys, prompt.keys), (self.values, prompt.values)):
                for i, x in src.items():
                    store[i] = x.new_zeros((m, x.shape[1], need_cols + max(GROW_MIN, need_cols // 8), x.shape[3]))
            assert k0.shape[0] == m
        elif n + m > self.keys[0].shape[0] or need_cols > self.capacity:
            rows = max(n + m, self.keys[0].shape[0])
            cap = max(self.capacity, need_cols + max(GROW_MIN, need_cols // 8))
            self._resize(rows, cap)
        for j in range(m):
            length = int(lengths[j])
            for i in prompt.keys:
                k, v = prompt.row(j, i)  # (kv_heads, length, d)
                self.keys[i][n + j, :, :length] = k
                self.values[i][n + j, :, :length] = v
        self.lengths = torch.cat([self.lengths, lengths])

    def absorb(self, other: KVStore) -> None:
        """Append ``other``'s live rows (copies of their used columns)."""
        m, n = other.rows, self.rows
        need = int(other.lengths.max())
        if n + m > self.keys[0].shape[0] or need > self.capacity:
            self._resize(max(n + m, self.keys[0].shape[0]), max(self.capacity, need + max(GROW_MIN, need // 8)))
        for store, src in ((self.keys, other.keys), (self.values, other.values)):
            for i, buf in src.items():
                store[i][n : n + m, :, :need] = buf[:m, :, :need]
        self.lengths = torch.cat([self.lengths, other.lengths])

    def keep(self, keep: list[int]) -> list[int]:
        """Keep rows ``keep`` (ascending); each freed slot below the new row count takes a kept row from the end
        (one row copied per hole). Returns the new order: new row ``j`` is old row ``order[j]``."""
        new_n = len(keep)
        kept = set(keep)
        holes = [j for j in range(new_n) if j not in kept]
        movers = [j for j in keep if j >= new_n]
        order = list(range(new_n))
        for hole, mover in zip(holes, movers, strict=True):
            for store in (self.keys, self.values):
                for buf in store.values():
                    buf[hole] = buf[mover]
            order[hole] = mover
        self.lengths = self.lengths[order]
        return order

    @contextlib.contextmanager
    def forward(self, valid_new: torch.Tensor, positions_new: torch.Tensor) -> Iterator[None]:
        """A decode forward: one new token per row (``valid_new``, ``positions_new``: (n, 1), all valid, at
        position ``lengths``); committed when the forward returns."""
        n = self.rows
        if valid_new.shape != (n, 1) or not bool(valid_new.all()) or not torch.equal(positions_new[:, 0], self.lengths):
            raise DecodeAttentionError("a running batch's forward feeds each row's next token at position lengths[row]")
        end = int(self.lengths.max()) + 1
        if end > self.capacity:
            self._resize(self.keys[0].shape[0], end + max(GROW_MIN, end // 8))
        with _active(self, {"rows": torch.arange(n, device=self.lengths.device)}):
            yield
        self.lengths = self.lengths + 1

    def _mask(self, sliding_window: int | None) -> torch.Tensor:
        plan = self._plan
        if sliding_window not in plan:
            cols = torch.arange(self.capacity, device=self.lengths.device)[None, :]  # (1, C)
            allowed = cols <= self.lengths[:, None]  # (n, C): the row's tokens and the new one
            if sliding_window is not None:
                allowed = allowed & (self.lengths[:, None] - cols < sliding_window)
            plan[sliding_window] = _bias(allowed)
        return plan[sliding_window]

    def attend(self, layer: int, query, key, value, scaling: float | None, sliding_window: int | None = None):
        """Write ``key``/``value`` (n, kv_heads, 1, d) at column ``lengths`` of each row of ``layer`` and attend
        ``query`` (n, heads, 1, d) over the row's columns."""
        if key.shape[2] != 1:
            raise DecodeAttentionError(f"a decode step feeds one token per row, layer {layer} got {key.shape[2]}")
        n = self.rows
        k_buf, v_buf = self.keys[layer], self.values[layer]
        rows = self._plan["rows"]
        k_buf[rows, :, self.lengths] = key[:, :, 0]
        v_buf[rows, :, self.lengths] = value[:, :, 0]
        return _attend(query, k_buf[:n], v_buf[:n], self._mask(sliding_window), scaling)


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
    """The registered attention: the active store's (module docstring), else transformers' ``sdpa``.

    Shapes: query (n, heads, q, head_dim), key/value (n, kv_heads, q, head_dim); returns (n, q, heads, head_dim).
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


def forward_mask(rows: int, q: int) -> torch.Tensor:
    """The 4-D mask handed to the model for a decode-loop forward: transformers passes a 4-D mask through
    unchanged, and :func:`decode_attention` uses its store's own masks, so this one only has to be 4-D."""
    return torch.ones((rows, 1, q, 1), dtype=torch.bool)


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
