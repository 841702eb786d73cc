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
  head_dim)`` of each row's own columns, ``lengths`` tokens per row. A prompt prefix that several rows start with
  (the G samples of one prompt, a system prompt) can be kept once for all of them (``prefix_ids``, per layer
  ``(segments, kv_heads, prefix_capacity, head_dim)``); a row's own columns then start after it (``offsets``):
  row ``i``'s token at position ``p`` sits in own column ``p - offsets[i]`` (no padding columns). A decode step
  writes one column per row in place; a row that finishes is replaced by the last row (one row copied,
  :meth:`~KVStore.keep`; a prefix no row uses any more is dropped); admitted rows are copied into free slots
  (:meth:`~KVStore.extend`, :meth:`~KVStore.absorb`: a prefix held already is not copied again). Nothing copies
  the whole batch except a buffer growing (columns in steps of at least :data:`GROW_MIN`).

Attention of one new token (decode) is two matmuls on the grouped heads, queries ``(n, kv_heads, groups, d)``
against the contiguous buffer ``(n, kv_heads, capacity, d)`` (columns past a row's length masked), softmax in
fp32. On CPU in bf16 that is ~9x faster than torch's SDPA kernel at one query, and reading the whole buffer is
~5x faster than a column slice of it, which bf16 matmuls copy first (measured in ``benchmarks/step.py``'s decode
profile). With shared prefixes it is cascade attention (as FlashInfer's and Hydragen's): per prefix one matmul
of all its rows' queries against its one copy, per row the same two matmuls over its own columns, the two
softmaxes merged exactly by their maxima and sums (log-sum-exp). Which prefixes are kept once
(:func:`shared_prefixes`) follows what that saves: at least :data:`SHARE_MIN_SAVED` key columns a layer, because
on CPU a decode layer's attention at these sizes is bound by its number of small operations more than by the
bytes it reads (measured with SmolLM2-135M on a 2-core AVX2 CPU, ``benchmarks/decode_cascade.py``: a whole decode
step there goes ~55-65% to the linears and LM head, ~15-19% to attention, ~7-12% to sampling; one layer's cascade
is 0.53x the plain attention at 8 rows in pairs over a 229-token prefix, 1.2x over 3,000 tokens, 1.3-3.5x at 32
rows in eights or all together). With the default config's designer prompts, 32 rows keep their 197-token system
prompt once (a decode step 1.28x faster); 8 rows save too little and decode as before.

Several new tokens (prefill) go to torch SDPA with a boolean mask. All of these equal transformers' ``sdpa`` up
to float summation order (``tests/policy/test_policy_kv.py``: within 1e-6 in fp32, through rows finishing and
joining). Sliding-window layers (the ``sliding_window`` keyword transformers passes per layer) are masked by
position distance, ``q_pos - k_pos < window``, in a row's own columns and in its shared prefix alike, exact
because nothing is evicted. Attention variants with extra terms (logit soft-capping, attention sinks) are
refused with :class:`DecodeAttentionError`.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
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
#: a prompt prefix several rows of a running batch start with is kept once for them (cascade attention) where
#: that saves reading at least this many key columns a layer, (rows - 1) x prefix tokens: below it the extra
#: small operations of the cascade cost more than the reading saved (one layer of SmolLM2-135M on a 2-core AVX2
#: CPU, benchmarks/decode_cascade.py: every measured case saving under 6,000 columns slower, 0.53-0.90x; from 7,000
#: up 1.05-3.5x but one, 0.96x; the whole decode step at 32 rows over the default designer prompts' 197-token
#: system prompt, 6,107 columns, 1.28x; benchmarks/results/decode_cascade_avx2.txt)
SHARE_MIN_SAVED = 6000

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


def _partial(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scale: float):
    """Attention of queries (B, kv_heads, Q, d) over keys/values (B, kv_heads, S, d) under an additive ``bias``
    (broadcast to (B, kv_heads, Q, S)), unnormalised so that parts over disjoint keys merge exactly: the score
    maxima ``m`` and the sums ``l`` of ``exp(scores - m)`` (B, kv_heads, Q, 1), and ``exp(scores - m) @ values``
    (B, kv_heads, Q, d), in fp32. A fully masked query gets ``m`` = the lowest float, ``l = 0``, zero outputs."""
    scores = torch.matmul(query, keys.transpose(-1, -2)).float().mul_(scale).add_(bias)
    m = scores.amax(dim=-1, keepdim=True).clamp_(min=torch.finfo(torch.float32).min)
    e = scores.sub_(m).exp_()
    return m, e.sum(dim=-1, keepdim=True), torch.matmul(e.to(values.dtype), values).float()


def _attend_cascade(query: torch.Tensor, own: tuple, prefix: tuple, members: tuple, scaling: float | None):
    """Decode attention of ``query`` (n, heads, 1, d) over each row's own columns ``own`` = (keys, values (n,
    kv_heads, C, d), bias (n, 1, 1, C)) and its shared prefix ``prefix`` = (keys, values (segments, kv_heads,
    P, d), bias), one matmul per prefix for all its rows' queries (``members``, :meth:`KVStore._members`); the
    two softmaxes merged by their log-sum-exp (cascade attention). Returns (n, 1, heads, d)."""
    n, heads, _, d = query.shape
    (k_own, v_own, own_bias), (k_pre, v_pre, pre_bias), (rows_of, slots, alone) = own, prefix, members
    kv_heads = k_own.shape[1]
    groups, (segments, width) = heads // kv_heads, rows_of.shape
    scale = scaling if scaling is not None else d**-0.5
    qg = query.reshape(n, kv_heads, groups, d)
    m_own, l_own, o_own = _partial(qg, k_own, v_own, own_bias, scale)  # (n, kv_heads, groups, 1 | d)
    qp = qg[rows_of].transpose(1, 2).reshape(segments, kv_heads, width * groups, d)  # a prefix's rows together

    def per_row(x: torch.Tensor) -> torch.Tensor:  # (segments, kv_heads, width * groups, e) -> (n, kv_heads, groups, e)
        x = x.reshape(segments, kv_heads, width, groups, x.shape[-1]).transpose(1, 2)
        return x.reshape(segments * width, kv_heads, groups, x.shape[-1])[slots]

    m_pre, l_pre, o_pre = map(per_row, _partial(qp, k_pre, v_pre, pre_bias, scale))
    if alone is not None:  # rows without a shared prefix: its part weighs nothing
        m_pre = m_pre.masked_fill(alone[:, None, None, None], torch.finfo(torch.float32).min)
    top = torch.maximum(m_own, m_pre)
    a_own, a_pre = (m_own - top).exp_(), (m_pre - top).exp_()
    out = (o_own * a_own + o_pre * a_pre) / (l_own * a_own + l_pre * a_pre)
    return out.to(v_own.dtype).reshape(n, 1, heads, d)


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


def shared_prefixes(prompts: list[list[int]], held: Sequence[tuple[int, ...]] = ()) -> list[tuple[int, ...]]:
    """Per prompt, the token ids of the prefix its row keeps once with other rows in a :class:`KVStore` (``()``:
    none), never a prompt's last token. Rows that start with one prefix share it where that saves reading at least
    :data:`SHARE_MIN_SAVED` columns a layer, ``(rows - 1) * len(prefix)``: the prefixes saving most are taken first,
    each row in one. A row whose prompt starts with a longer prefix the running batch holds already (``held``,
    :attr:`KVStore.prefix_ids`) joins that one."""
    order = sorted(range(len(prompts)), key=lambda i: prompts[i])
    common = [_common(prompts[a], prompts[b]) for a, b in zip(order, order[1:])]  # neighbours in sorted order
    ranges = set()  # (columns saved, length, first, last): the sorted rows order[first..last] share `length`
    for k, n in enumerate(common):
        lo, hi = k, k + 1
        while lo > 0 and common[lo - 1] >= n:
            lo -= 1
        while hi < len(common) and common[hi] >= n:
            hi += 1
        ranges.add(((hi - lo) * n, n, lo, hi))
    out: list[tuple[int, ...]] = [()] * len(prompts)
    for _, n, lo, hi in sorted(ranges, reverse=True):
        free = [order[j] for j in range(lo, hi + 1) if not out[order[j]]]
        n = min([n] + [len(prompts[i]) - 1 for i in free])
        if len(free) > 1 and n > 0 and (len(free) - 1) * n >= SHARE_MIN_SAVED:
            for i in free:
                out[i] = tuple(prompts[i][:n])
    for i, prompt in enumerate(prompts):
        longer = [h for h in held if len(out[i]) < len(h) < len(prompt) and tuple(prompt[: len(h)]) == h]
        if longer:
            out[i] = max(longer, key=len)
    return out


def _common(a: list[int], b: list[int]) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


class KVStore:
    """The running batch's keys and values, one slot per row, with shared prompt prefixes kept once (module
    docstring).

    Shapes: ``lengths`` (n,) tokens cached per row (the next token's position); ``offsets`` (n,) the length of
    the row's shared prefix (0: none) and ``segment`` (n,) its index in ``prefix_ids`` (-1: none); layer buffers
    ``(rows, kv_heads, capacity, head_dim)`` with ``rows >= n``, column ``c`` of row ``r`` holding position
    ``offsets[r] + c``; prefix buffers ``(segments, kv_heads, prefix_capacity, head_dim)``, segment ``s``
    holding positions ``0 .. len(prefix_ids[s]) - 1``.
    """

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.lengths = torch.zeros(0, dtype=torch.long)
        self.offsets = torch.zeros(0, dtype=torch.long)
        self.segment = torch.zeros(0, dtype=torch.long)
        self.prefix_keys: dict[int, torch.Tensor] = {}
        self.prefix_values: dict[int, torch.Tensor] = {}
        self.prefix_ids: list[tuple[int, ...]] = []  # the token ids of each shared prefix (its identity)
        self._plan: dict[Any, Any] = {}

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def capacity(self) -> int:
        return next(iter(self.keys.values())).shape[2] if self.keys else 0

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``i``'s buffers of the live rows' own columns: (n, kv_heads, capacity, head_dim); row ``r`` is
        valid in columns ``< lengths[r] - offsets[r]``."""
        return self.keys[i][: self.rows], self.values[i][: self.rows]

    def row(self, r: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row ``r``'s keys and values at ``layer`` in position order, its shared prefix included:
        (kv_heads, lengths[r], head_dim)."""
        own = int(self.lengths[r] - self.offsets[r])
        k, v = self.keys[layer][r, :, :own], self.values[layer][r, :, :own]
        s = int(self.segment[r])
        if s < 0:
            return k, v
        p = int(self.offsets[r])
        return torch.cat([self.prefix_keys[layer][s, :, :p], k], 1), torch.cat([self.prefix_values[layer][s, :, :p], v], 1)

    def _own(self, lengths: torch.Tensor | None = None, offsets: torch.Tensor | None = None) -> int:
        """The most columns a row holds in its own buffer."""
        lengths = self.lengths if lengths is None else lengths
        offsets = self.offsets if offsets is None else offsets
        return int((lengths - offsets).max()) if len(lengths) else 0

    def _resize(self, rows: int, capacity: int) -> None:
        """Move every layer into buffers of ``rows`` x ``capacity`` (zeros where nothing is held)."""
        n, used = self.rows, self._own()
        for store in (self.keys, self.values):
            for i, buf in store.items():
                new = buf.new_zeros((rows, buf.shape[1], capacity, buf.shape[3]))
                new[:n, :, :used] = buf[:n, :, :used]
                store[i] = new

    def _room(self, m: int, need: int, like: dict[int, torch.Tensor]) -> None:
        """Make room for ``m`` more rows of ``need`` own columns (buffers shaped like ``like``'s layers)."""
        spare = lambda cols: cols + max(GROW_MIN, cols // 8)  # noqa: E731
        if not self.keys:
            for store in (self.keys, self.values):
                for i, x in like.items():
                    store[i] = x.new_zeros((m, x.shape[1], spare(need), x.shape[-1]))
        elif self.rows + m > self.keys[0].shape[0] or need > self.capacity:
            self._resize(max(self.rows + m, self.keys[0].shape[0]), max(self.capacity, spare(need)))

    def _segment_of(self, ids: tuple[int, ...], layers: Callable[[], dict[int, tuple[torch.Tensor, torch.Tensor]]]) -> int:
        """The index of the shared prefix ``ids``, added from ``layers()`` (layer -> keys, values (kv_heads,
        len(ids), d)) when the store does not hold it yet."""
        if ids in self.prefix_ids:
            return self.prefix_ids.index(ids)
        s, p = len(self.prefix_ids), len(ids)
        for i, (k, v) in layers().items():
            for store, x in ((self.prefix_keys, k), (self.prefix_values, v)):
                old = store.get(i)
                cap = max(p, old.shape[2] if old is not None else 0)
                new = x.new_zeros((s + 1, x.shape[0], cap, x.shape[2]))
                if old is not None:
                    new[:s, :, : old.shape[2]] = old
                new[s, :, :p] = x
                store[i] = new
        self.prefix_ids.append(ids)
        return s

    def extend(self, prompt: PromptKV, shared: Sequence[tuple[int, ...]] | None = None) -> None:
        """Copy every row of ``prompt`` (after its prefill) into new slots, without its padding. ``shared[j]``:
        the token ids of a prefix of row ``j`` that the store keeps once for every row starting with it
        (:func:`shared_prefixes`; ``()``: none): the row's own buffer holds only the columns after it."""
        m = prompt.valid.shape[0]
        lengths = prompt.valid.sum(dim=1).to(self.lengths.device)  # (m,)
        shared = list(shared) if shared is not None else [()] * m
        if len(shared) != m or any(len(ids) >= int(n) for ids, n in zip(shared, lengths) if ids):
            raise DecodeAttentionError(f"extend: shared prefixes must be one per row ({m}) and shorter than the row")
        offsets = torch.tensor([len(ids) for ids in shared], dtype=torch.long, device=self.lengths.device)

        def prefix(j: int, p: int) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
            return {i: (k[:, :p], v[:, :p]) for i in prompt.keys for k, v in [prompt.row(j, i)]}

        segment = [self._segment_of(ids, lambda j=j, p=len(ids): prefix(j, p)) if ids else -1 for j, ids in enumerate(shared)]
        self._room(m, self._own(lengths, offsets), prompt.keys)
        n = self.rows
        for j in range(m):
            start, end = int(offsets[j]), int(lengths[j])
            for i in prompt.keys:
                k, v = prompt.row(j, i)  # (kv_heads, length, d)
                self.keys[i][n + j, :, : end - start] = k[:, start:]
                self.values[i][n + j, :, : end - start] = v[:, start:]
        self._append(lengths, offsets, torch.tensor(segment, dtype=torch.long, device=self.lengths.device))

    def _append(self, lengths: torch.Tensor, offsets: torch.Tensor, segment: torch.Tensor) -> None:
        self.lengths = torch.cat([self.lengths, lengths])
        self.offsets = torch.cat([self.offsets, offsets])
        self.segment = torch.cat([self.segment, segment])

    def absorb(self, other: KVStore) -> None:
        """Append ``other``'s live rows (copies of their own columns; a shared prefix this store holds already
        is not copied again)."""
        m, n = other.rows, self.rows

        def prefix(s: int, p: int) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
            return {i: (other.prefix_keys[i][s, :, :p], other.prefix_values[i][s, :, :p]) for i in other.prefix_keys}

        remap = [self._segment_of(ids, lambda s=s, p=len(ids): prefix(s, p)) for s, ids in enumerate(other.prefix_ids)]
        need = other._own()
        self._room(m, need, other.keys)
        for store, src in ((self.keys, other.keys), (self.values, other.values)):
            for i, buf in src.items():
                store[i][n : n + m, :, :need] = buf[:m, :, :need]
        lookup = torch.tensor([*remap, -1], dtype=torch.long, device=self.lengths.device)
        self._append(other.lengths, other.offsets, lookup[other.segment])  # -1 indexes the trailing -1

    def keep(self, keep: list[int]) -> list[int]:
        """Keep rows ``keep`` (ascending); each freed slot below the new row count takes a kept row from the end
        (one row copied per hole); shared prefixes no row uses any more are dropped. Returns the new order: new
        row ``j`` is old row ``order[j]``."""
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
        index = torch.tensor(order, dtype=torch.long, device=self.lengths.device)
        self.lengths, self.offsets, self.segment = self.lengths[index], self.offsets[index], self.segment[index]
        self._drop_unused_prefixes()
        return order

    def _drop_unused_prefixes(self) -> None:
        used = sorted(set(self.segment.tolist()) - {-1})
        if len(used) == len(self.prefix_ids):
            return
        self.prefix_ids = [self.prefix_ids[s] for s in used]
        cap = max((len(ids) for ids in self.prefix_ids), default=0)
        index = torch.tensor(used, dtype=torch.long, device=self.lengths.device)
        for store in (self.prefix_keys, self.prefix_values):
            for i, buf in list(store.items()):
                store[i] = buf[index, :, :cap].contiguous()
        lookup = torch.full((len(used) and max(used) + 2 or 1,), -1, dtype=torch.long, device=self.lengths.device)
        lookup[index] = torch.arange(len(used), device=self.lengths.device)
        self.segment = lookup[self.segment]  # -1 indexes the trailing -1

    @contextlib.contextmanager
    def forward(self, valid_new: torch.Tensor, positions_new: torch.Tensor) -> Iterator[None]:
        """A decode forward: one new token per row (``valid_new``, ``positions_new``: (n, 1), all valid, at
        position ``lengths``); committed when the forward returns."""
        n = self.rows
        if valid_new.shape != (n, 1) or not bool(valid_new.all()) or not torch.equal(positions_new[:, 0], self.lengths):
            raise DecodeAttentionError("a running batch's forward feeds each row's next token at position lengths[row]")
        end = self._own() + 1
        if end > self.capacity:
            self._resize(self.keys[0].shape[0], end + max(GROW_MIN, end // 8))
        with _active(self, {"rows": torch.arange(n, device=self.lengths.device), "cols": self.lengths - self.offsets}):
            yield
        self.lengths = self.lengths + 1

    def _mask(self, sliding_window: int | None) -> torch.Tensor:
        """(n, 1, 1, capacity) bias over the rows' own columns: the row's tokens after its prefix and the new one."""
        plan = self._plan
        if sliding_window not in plan:
            cols = torch.arange(self.capacity, device=self.lengths.device)[None, :]  # (1, C)
            own = self.lengths - self.offsets
            allowed = cols <= own[:, None]  # (n, C)
            if sliding_window is not None:
                allowed = allowed & (own[:, None] - cols < sliding_window)
            plan[sliding_window] = _bias(allowed)
        return plan[sliding_window]

    def _members(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """This forward's rows per shared prefix: ``members`` (segments, width) row indices (padded with row 0,
        whose results there are never read), ``slots`` (n,) each row's place in ``members`` flattened, and
        ``alone`` (n,) the rows without a shared prefix (None when there are none)."""
        plan = self._plan
        if "members" not in plan:
            groups: list[list[int]] = [[] for _ in self.prefix_ids]
            segment = self.segment.tolist()
            for r, s in enumerate(segment):
                if s >= 0:
                    groups[s].append(r)
            width = max(len(g) for g in groups)
            slots = [0] * len(segment)
            for s, g in enumerate(groups):
                for j, r in enumerate(g):
                    slots[r] = s * width + j
            device = self.lengths.device
            alone = self.segment < 0
            plan["members"] = (
                torch.tensor([g + [0] * (width - len(g)) for g in groups], dtype=torch.long, device=device),
                torch.tensor(slots, dtype=torch.long, device=device),
                alone if bool(alone.any()) else None,
            )
        return plan["members"]

    def _prefix_mask(self, sliding_window: int | None, groups: int) -> torch.Tensor:
        """Bias over the prefix columns: (segments, 1, 1, P) for their lengths, or with a sliding window
        (segments, 1, width * groups, P) per member's position."""
        plan = self._plan
        key = ("prefix", sliding_window)
        if key not in plan:
            device = self.lengths.device
            cap = self.prefix_keys[0].shape[2]
            cols = torch.arange(cap, device=device)
            lengths = torch.tensor([len(ids) for ids in self.prefix_ids], device=device)
            allowed = (cols[None, :] < lengths[:, None])[:, None, None, :]  # (S, 1, 1, P)
            if sliding_window is not None:
                members = self._members()[0]
                near = self.lengths[members][:, :, None] - cols[None, None, :] < sliding_window  # (S, width, P)
                allowed = allowed & near.repeat_interleave(groups, dim=1)[:, None]
            plan[key] = torch.zeros(allowed.shape, dtype=torch.float32, device=device).masked_fill_(~allowed, float("-inf"))
        return plan[key]

    def attend(self, layer: int, query, key, value, scaling: float | None, sliding_window: int | None = None):
        """Write ``key``/``value`` (n, kv_heads, 1, d) at each row's next own column of ``layer`` and attend
        ``query`` (n, heads, 1, d) over the row's tokens: its shared prefix (once per prefix for all its rows)
        and its own columns."""
        if key.shape[2] != 1:
            raise DecodeAttentionError(f"a decode step feeds one token per row, layer {layer} got {key.shape[2]}")
        n = self.rows
        k_buf, v_buf = self.keys[layer], self.values[layer]
        rows, cols = self._plan["rows"], self._plan["cols"]
        k_buf[rows, :, cols] = key[:, :, 0]
        v_buf[rows, :, cols] = value[:, :, 0]
        if not self.prefix_ids:
            return _attend(query, k_buf[:n], v_buf[:n], self._mask(sliding_window), scaling)
        groups = query.shape[1] // key.shape[1]
        prefix = (self.prefix_keys[layer], self.prefix_values[layer], self._prefix_mask(sliding_window, groups))
        return _attend_cascade(query, (k_buf[:n], v_buf[:n], self._mask(sliding_window)), prefix, self._members(), scaling)


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
