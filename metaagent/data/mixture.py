"""Mixture sampler: every batch takes a fixed share of tasks from each domain (paper Sec. 4.1: batch size 8,
half from Polaris math, half from APPS / CodeContests code).

The shares come from ``data.mix`` (:func:`batch_shares`): an equal share for every domain the tasks hold
unless the mix says otherwise, and a domain whose tasks were loaded but whose share is 0 is refused by name
(its tasks would never be drawn).

Each domain is walked through its own seeded permutation; when a domain's tasks run out, its next epoch
uses a new permutation derived from ``(seed, domain, epoch)``, so epochs reshuffle deterministically and
domains of different sizes cycle independently. ``state_dict()`` / ``load_state_dict()`` save and restore
the position; a restored sampler continues with exactly the batches the original would have produced.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from .errors import DataError
from .tasks import Task

STATE_VERSION = 1
DRAWN_PREFIX = "data/drawn/"  # metric key of the tasks a step drew from one domain: data/drawn/<domain>


def batch_shares(mix: Mapping[str, float], counts: Mapping[str, int]) -> dict[str, float]:
    """Each domain's weight in a training batch, for the loaded tasks ``counts`` (domain -> number of tasks).

    ``mix`` empty: every loaded domain alike (weight 1 each). Otherwise ``mix[d]`` for every loaded domain
    ``d`` (the sampler normalises: share_d = w_d / sum w). A loaded domain without a positive weight, a
    negative weight, or a positive weight for a domain with no tasks is a :class:`DataError` naming it.
    """
    loaded = sorted(d for d, n in counts.items() if n > 0)
    if not mix:
        return {d: 1.0 for d in loaded}
    negative = sorted(d for d, w in mix.items() if w < 0)
    if negative:
        raise DataError(f"data.mix weights must be >= 0; {negative} have {[mix[d] for d in negative]}")
    missing = [d for d in loaded if mix.get(d, 0) <= 0]
    if missing:
        example = ", ".join(f"{d}: {mix.get(d) or 1:g}" for d in loaded)
        raise DataError(
            f"data.mix gives domain(s) {missing} share 0, but data.train loaded "
            f"{', '.join(f'{counts[d]} {d}' for d in missing)} task(s) that would never be drawn; "
            f"give each a weight (e.g. data.mix={{{example}}}) or leave its tasks out of data.train"
        )
    absent = sorted(d for d, w in mix.items() if w > 0 and d not in loaded)
    if absent:
        raise DataError(
            f"data.mix asks for domain(s) {absent} but no task of them was loaded (loaded: "
            f"{dict(sorted(counts.items()))}); load their tasks in data.train or drop them from data.mix"
        )
    return {d: float(mix[d]) for d in loaded}


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
    ``ratio`` maps domains to weights (normalised, :func:`batch_shares`: every domain of ``tasks`` needs a
    positive one). Default: every domain of ``tasks`` alike. ``drawn`` counts the tasks drawn per domain.
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
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        ratio = batch_shares(ratio or {}, {d: len(ts) for d, ts in pools.items()})
        if not ratio:
            raise DataError("the mixture sampler got no tasks")
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
        self.drawn: Counter[str] = Counter()  # tasks drawn per domain since this sampler was built

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
        self.drawn[domain] += count
        return out

    def next_batch(self) -> list[Task]:
        """The next ``batch_size`` tasks, domains in sorted order (e.g. code slots, then math slots)."""
        batch = [t for d in self.domains for t in self._take(d, self.slots[d])]
        self.batches += 1
        return batch

    def __iter__(self) -> Iterator[list[Task]]:
        while True:
            yield self.next_batch()

    def drawn_metrics(self, since: Mapping[str, int] | None = None) -> dict[str, float]:
        """``data/drawn/<domain>``: tasks drawn from each domain since the counts ``since`` (a copy of
        :attr:`drawn` taken earlier; None: since the start), every domain of the mix listed, 0 included."""
        since = since or {}
        return {f"{DRAWN_PREFIX}{d}": float(self.drawn[d] - since.get(d, 0)) for d in self.domains}

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
