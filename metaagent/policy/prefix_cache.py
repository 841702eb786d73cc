"""KV caches of shared prompt prefixes for the ``hf`` backend (automatic prefix caching, as in vLLM).

A prompt's token ids are cut into fixed blocks of ``block`` tokens. A cached block holds the keys and
values of its tokens at every layer, computed with the whole prefix before it in context, so it is keyed
by *(parent block, its own tokens)*: a trie over token ids, exact (no hashes that could collide). A
request whose prompt starts with a chain of cached blocks prefills only the tokens after the chain.

- Keys are post-RoPE, so a block is valid at the absolute positions it was computed at: block ``k`` always
  sits at positions ``k*block .. (k+1)*block - 1`` of its row, whatever padding the batch puts around it.
- Memory is bounded: ``nbytes`` never exceeds ``max_bytes``; the least recently used block *without cached
  children* is evicted first (a prefix stays while a longer prompt needs it).
- The cache belongs to one set of weights. :meth:`PrefixCache.check_weights` compares a fingerprint of
  the parameters (storage pointer and in-place version counter of every tensor: bumped by optimizer steps,
  ``load_state_dict`` and any ``p.add_``) and drops every block when it changed; owners also call
  :meth:`clear` explicitly after an update.

Shapes: one block's layer entry is ``(keys, values)``, each ``(kv_heads, block, head_dim)``.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: tokens per cached block (the granularity of reuse)
DEFAULT_BLOCK = 32


@dataclass
class _Block:
    id: int
    parent: int  # 0 = the root (the empty prefix)
    key: tuple[int, tuple[int, ...]]
    layers: list[tuple[torch.Tensor, torch.Tensor]]
    nbytes: int
    children: int = 0


@dataclass
class PrefixStats:
    """Counters since the policy was built: prompt tokens read from the cache vs prefilled."""

    hit_tokens: int = 0
    prefilled_tokens: int = 0
    shared_prefills: int = 0  # prefixes prefilled once for several rows of one batch
    evicted_blocks: int = 0
    invalidations: int = 0  # times the cache was dropped because the weights changed

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class PrefixCache:
    """A bounded LRU trie of KV blocks. Not thread-safe: the owning policy calls it under its model lock."""

    max_bytes: int
    block: int = DEFAULT_BLOCK
    stats: PrefixStats = field(default_factory=PrefixStats)
    nbytes: int = 0
    weights_version: int = 0  # bumped by every clear(): what the cache was built under
    _blocks: collections.OrderedDict[int, _Block] = field(default_factory=collections.OrderedDict)
    _index: dict[tuple[int, tuple[int, ...]], int] = field(default_factory=dict)
    _next_id: int = 1
    _fingerprint: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if self.max_bytes <= 0:
            raise ValueError(f"PrefixCache needs max_bytes > 0, got {self.max_bytes}")
        if self.block < 1:
            raise ValueError(f"PrefixCache block must be >= 1 token, got {self.block}")

    def __len__(self) -> int:
        return len(self._blocks)

    # ------------------------------------------------------------------------------------------ weights
    def clear(self) -> None:
        """Drop every block (the weights changed)."""
        self._blocks.clear()
        self._index.clear()
        self.nbytes = 0
        self.weights_version += 1

    def check_weights(self, model: Any) -> None:
        """Clear the cache if ``model``'s parameters changed since the last call (see the module doc)."""
        fp = weights_fingerprint(model)
        if self._fingerprint is not None and fp != self._fingerprint:
            if self._blocks:
                self.stats.invalidations += 1
            self.clear()
        self._fingerprint = fp

    # ------------------------------------------------------------------------------------------- lookup
    def match(self, ids: list[int], limit: int) -> list[_Block]:
        """The longest chain of cached blocks that starts ``ids`` and covers at most ``limit`` tokens;
        marks them recently used (children before parents, so a parent is never older than its child)."""
        chain: list[_Block] = []
        parent = 0
        for start in range(0, limit - self.block + 1, self.block):
            bid = self._index.get((parent, tuple(ids[start : start + self.block])))
            if bid is None:
                break
            chain.append(self._blocks[bid])
            parent = bid
        for b in reversed(chain):
            self._blocks.move_to_end(b.id)
        return chain

    @staticmethod
    def gather(chain: list[_Block]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The chain's keys and values per layer, each ``(kv_heads, len(chain) * block, head_dim)``."""
        import torch

        n_layers = len(chain[0].layers)
        return [
            (
                torch.cat([b.layers[i][0] for b in chain], dim=1),
                torch.cat([b.layers[i][1] for b in chain], dim=1),
            )
            for i in range(n_layers)
        ]

    # ------------------------------------------------------------------------------------------- insert
    def insert(self, ids: list[int], start: int, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Cache the full blocks of ``ids`` from token ``start`` on.

        ``start`` is a multiple of ``block`` and ``ids[:start]`` is cached (a chain from :meth:`match`);
        ``layers[i]`` are layer ``i``'s keys and values of ``ids[start:]``, ``(kv_heads, >= n, head_dim)``
        views (copied here, so a block never pins a batch's cache tensor).
        """
        assert start % self.block == 0
        parent = 0
        if start:
            chain = self.match(ids, start)
            if len(chain) * self.block != start:
                return  # the prefix was evicted meanwhile: its blocks cannot be reached
            parent = chain[-1].id
        end = len(ids) - len(ids) % self.block
        for s in range(start, end, self.block):
            key = (parent, tuple(ids[s : s + self.block]))
            existing = self._index.get(key)
            if existing is not None:
                self._blocks.move_to_end(existing)
                parent = existing
                continue
            o = s - start
            kv = [(k[:, o : o + self.block].clone(), v[:, o : o + self.block].clone()) for k, v in layers]
            nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
            if not self._make_room(nbytes, keep=parent):
                return
            block = _Block(self._next_id, parent, key, kv, nbytes)
            self._next_id += 1
            self._blocks[block.id] = block
            self._index[key] = block.id
            if parent:
                self._blocks[parent].children += 1
            self.nbytes += nbytes
            parent = block.id

    def _make_room(self, nbytes: int, keep: int) -> bool:
        """Evict least recently used leaf blocks (never ``keep``) until ``nbytes`` more fit."""
        while self.nbytes + nbytes > self.max_bytes:
            victim = next((b for b in self._blocks.values() if b.children == 0 and b.id != keep), None)
            if victim is None:
                return False
            del self._blocks[victim.id]
            del self._index[victim.key]
            if victim.parent:
                self._blocks[victim.parent].children -= 1
            self.nbytes -= victim.nbytes
            self.stats.evicted_blocks += 1
        return True


def weights_fingerprint(model: Any) -> tuple[Any, ...]:
    """Storage pointer and in-place version counter of every parameter: changes with any weight update."""
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def shared_prefix_lengths(prompts: list[list[int]], block: int) -> list[int]:
    """Per prompt, the longest block-aligned prefix it shares with another prompt of the list, leaving at
    least its last token out (the prefill must produce that token's logits)."""
    order = sorted(range(len(prompts)), key=lambda i: prompts[i])
    out = [0] * len(prompts)
    for a, b in zip(order, order[1:]):
        x, y = prompts[a], prompts[b]
        n, limit = 0, min(len(x), len(y))
        while n < limit and x[n] == y[n]:
            n += 1
        for i in (a, b):
            cap = len(prompts[i]) - 1
            out[i] = max(out[i], (min(n, cap) // block) * block)
    return out
