"""Mixture sampler: every batch takes a fixed share of tasks from each domain (paper Sec. 4.1: batch size 8,
half from Polaris math, half from APPS / CodeContests code).

Each domain is walked through its own seeded permutation; when a domain's tasks run out, its next epoch
uses a new permutation derived from ``(seed, domain, epoch)``, so epochs reshuffle deterministically and
domains of different sizes cycle independently. ``state_dict()`` / ``load_state_dict()`` save and restore
the position; a restored sampler continues with exactly the batches the original would have produced.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from metaagent.domain import batch_ratio, domain_names

from .tasks import Task

DEFAULT_MATH_FRACTION = 0.5  # the paper's mixture: half math, half code (Domain.batch_share)
STATE_VERSION = 1


def _slots(batch_size: int, ratio: Mapping[str, float]) -> dict[str, int]:
    """Tasks per batch for each domain: largest-remainder rounding of ``batch_size * share``."""
    total = sum(ratio.values())
    exact = {d: batch_size * r / total for d, r in ratio.items()}
    slots = {d: int(v) for d, v in exact.items()}
    by_remainder = sorted(exact, key=lambda d: (-(exact[d] - slots[d]), d))
    for d in by_remainder[: batch_size - sum(slots.values())]:
        slots[d] += 1
    return slots


class MixtureSampler:
    """Infinite, seeded, resumable batches with per-domain shares.

    ``tasks`` is an iterable of tasks (grouped by ``task.domain``) or a mapping ``domain -> tasks``.
    ``ratio`` maps domains to shares (normalised); a domain with share 0 is never drawn. Default: each
    registered domain's ``batch_share`` at :data:`DEFAULT_MATH_FRACTION` (math and code half each).
    """

    def __init__(
        self,
        tasks: Iterable[Task] | Mapping[str, Sequence[Task]],
        *,
        batch_size: int = 8,
        ratio: Mapping[str, float] | None = None,
        seed: int = 0,
    ) -> None:
        if isinstance(tasks, Mapping):
            pools = {d: list(ts) for d, ts in tasks.items()}
        else:
            pools = {}
            for t in tasks:
                pools.setdefault(t.domain, []).append(t)
        ratio = dict(batch_ratio(DEFAULT_MATH_FRACTION, domain_names()) if ratio is None else ratio)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if any(r < 0 for r in ratio.values()) or sum(ratio.values()) <= 0:
            raise ValueError(f"ratio shares must be >= 0 with a positive sum, got {ratio}")
        ratio = {d: r for d, r in ratio.items() if r > 0}
        empty = [d for d in ratio if not pools.get(d)]
        if empty:
            raise ValueError(
                f"ratio asks for domain(s) {empty} but no tasks of that domain were given "
                f"(have: { {d: len(ts) for d, ts in pools.items()} }); load them or set their share to 0"
            )
        self.batch_size = batch_size
        self.seed = seed
        self.slots = _slots(batch_size, ratio)
        starved = [d for d, n in self.slots.items() if n == 0]
        if starved:
            raise ValueError(
                f"batch_size {batch_size} is too small to give domain(s) {starved} a slot; raise it"
            )
        self.domains = sorted(self.slots)
        self._pools = {d: pools[d] for d in self.domains}
        self._epoch = {d: 0 for d in self.domains}
        self._pos = {d: 0 for d in self.domains}
        self._orders: dict[str, tuple[int, list[int]]] = {}
        self.batches = 0

    # ---- order ----------------------------------------------------------------------------------------------

    def _order(self, domain: str) -> list[int]:
        epoch = self._epoch[domain]
        cached = self._orders.get(domain)
        if cached is None or cached[0] != epoch:
            order = list(range(len(self._pools[domain])))
            random.Random(f"{self.seed}/{domain}/{epoch}").shuffle(order)
            cached = (epoch, order)
            self._orders[domain] = cached
        return cached[1]

    def _take(self, domain: str, count: int) -> list[Task]:
        pool, out = self._pools[domain], []
        for _ in range(count):
            if self._pos[domain] >= len(pool):
                self._epoch[domain] += 1
                self._pos[domain] = 0
            out.append(pool[self._order(domain)[self._pos[domain]]])
            self._pos[domain] += 1
        return out

    def next_batch(self) -> list[Task]:
        """The next ``batch_size`` tasks, domains in sorted order (e.g. code slots, then math slots)."""
        batch = [t for d in self.domains for t in self._take(d, self.slots[d])]
        self.batches += 1
        return batch

    def __iter__(self) -> Iterator[list[Task]]:
        while True:
            yield self.next_batch()

    @property
    def epochs(self) -> dict[str, int]:
        """Completed passes over each domain's tasks."""
        return {d: self._epoch[d] + (self._pos[d] >= len(self._pools[d])) for d in self.domains}

    # ---- resume ---------------------------------------------------------------------------------------------

    def _fingerprint(self) -> str:
        h = hashlib.sha256()
        for d in self.domains:
            h.update(d.encode() + b"\0")
            for t in self._pools[d]:
                h.update(t.id.encode() + b"\0")
        return h.hexdigest()[:16]

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "seed": self.seed,
            "slots": dict(self.slots),
            "fingerprint": self._fingerprint(),
            "epoch": dict(self._epoch),
            "position": dict(self._pos),
            "batches": self.batches,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"sampler state version {state.get('version')!r}; this code reads {STATE_VERSION}"
            )
        mismatch = [
            name
            for name, mine in (
                ("seed", self.seed),
                ("slots", self.slots),
                ("fingerprint", self._fingerprint()),
            )
            if state.get(name) != mine
        ]
        if mismatch:
            raise ValueError(
                f"sampler state does not fit this sampler ({', '.join(mismatch)} differ): it was saved for another "
                "task set, seed, batch size or ratio; build the sampler with the settings of the saved run"
            )
        self._epoch = {d: int(state["epoch"][d]) for d in self.domains}
        self._pos = {d: int(state["position"][d]) for d in self.domains}
        self.batches = int(state["batches"])
