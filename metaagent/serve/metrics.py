"""Server metrics in the Prometheus text exposition format (version 0.0.4), written here without a client
library: counters, gauges and histograms with labels, thread-safe, rendered by :meth:`Metrics.render`.

Exposed at ``GET /metrics``:

- ``metaagent_serve_requests_total{route,status}``, ``metaagent_serve_request_duration_seconds{route}``
  (histogram), ``metaagent_serve_requests_in_flight``;
- ``metaagent_serve_tokens_total{role,kind}`` (kind = prompt | completion; role = designer | executor | judge);
- ``metaagent_serve_designs_total{valid}``, ``metaagent_serve_executions_total{status}`` (sandbox outcomes:
  ok, invalid, error, timeout, limit), ``metaagent_serve_reward_errors_total`` (rewards that could not be
  computed for tasks that carried a reference);
- from the running components at scrape time: batcher calls and mean batch size per model, sandbox
  workers started and replaced, ``metaagent_serve_ready``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: request latency buckets in seconds (teams take from under a second to minutes)
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

Labels = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(str(v))}"' for n, v in zip(names, values)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class _Metric:
    kind = ""

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, str]) -> Labels:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {sorted(labels)}")
        return tuple(str(labels[n]) for n in self.labelnames)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    def samples(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help, labelnames)
        self._values: dict[Labels, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise ValueError(f"counter {self.name} can only increase, got {amount}")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def samples(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        return [f"{self.name}{_labels(self.labelnames, k)} {_number(v)}" for k, v in items]


class Gauge(_Metric):
    """A gauge set directly, or read from ``fn() -> {label values: value}`` at render time."""

    kind = "gauge"

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        fn: Callable[[], dict[Labels, float]] | None = None,
    ) -> None:
        super().__init__(name, help, labelnames)
        self._values: dict[Labels, float] = {}
        self._fn = fn

    def set(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = float(value)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def dec(self, amount: float = 1.0, **labels: str) -> None:
        self.inc(-amount, **labels)

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def samples(self) -> list[str]:
        if self._fn is not None:
            items = sorted(self._fn().items())
        else:
            with self._lock:
                items = sorted(self._values.items())
        return [f"{self.name}{_labels(self.labelnames, k)} {_number(v)}" for k, v in items]


class CallbackCounter(Gauge):
    """A counter whose values are read from a component at render time (e.g. the batcher's call count)."""

    kind = "counter"


class Histogram(_Metric):
    kind = "histogram"

    def __init__(
        self, name: str, help: str, labelnames: Sequence[str] = (), buckets: Iterable[float] = LATENCY_BUCKETS
    ) -> None:
        super().__init__(name, help, labelnames)
        self.buckets = tuple(sorted(buckets)) + (math.inf,)
        self._counts: dict[Labels, list[int]] = {}
        self._sums: dict[Labels, float] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            counts = self._counts.setdefault(key, [0] * len(self.buckets))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    counts[i] += 1
            self._sums[key] = self._sums.get(key, 0.0) + value

    def count(self, **labels: str) -> int:
        with self._lock:
            counts = self._counts.get(self._key(labels))
            return counts[-1] if counts else 0

    def samples(self) -> list[str]:
        with self._lock:
            items = sorted((k, list(c), self._sums[k]) for k, c in self._counts.items())
        lines = []
        for key, counts, total in items:
            for bound, n in zip(self.buckets, counts):
                le = 'le="' + _number(bound) + '"'
                lines.append(f"{self.name}_bucket{_labels(self.labelnames, key, le)} {n}")
            lines.append(f"{self.name}_sum{_labels(self.labelnames, key)} {_number(total)}")
            lines.append(f"{self.name}_count{_labels(self.labelnames, key)} {counts[-1]}")
        return lines


class Metrics:
    """The server's metrics. ``components`` callbacks are attached by the service once models are loaded."""

    def __init__(self) -> None:
        p = "metaagent_serve_"
        self.requests = Counter(p + "requests_total", "HTTP requests by route and status code.", ("route", "status"))
        self.latency = Histogram(p + "request_duration_seconds", "Time to the last response byte.", ("route",))
        self.in_flight = Gauge(p + "requests_in_flight", "Team requests being served now.")
        self.tokens = Counter(p + "tokens_total", "Tokens per logical role and kind.", ("role", "kind"))
        self.designs = Counter(p + "designs_total", "Designs produced, by validity.", ("valid",))
        self.executions = Counter(p + "executions_total", "Sandboxed executions by outcome.", ("status",))
        self.reward_errors = Counter(p + "reward_errors_total", "Rewards that could not be computed.")
        self.selections = Counter(p + "selections_total", "Answer selections by method.", ("method",))
        self.record_errors = Counter(p + "record_errors_total", "Teams that could not be appended to --record.")
        self._callbacks: list[_Metric] = []
        self._lock = threading.Lock()

    def add_callback(self, metric: _Metric) -> None:
        with self._lock:
            self._callbacks = [m for m in self._callbacks if m.name != metric.name] + [metric]

    def render(self) -> str:
        with self._lock:
            metrics = [
                self.requests, self.latency, self.in_flight, self.tokens, self.designs, self.executions,
                self.reward_errors, self.selections, self.record_errors, *self._callbacks,
            ]  # fmt: skip
        lines: list[str] = []
        for m in metrics:
            lines += m.header() + m.samples()
        return "\n".join(lines) + "\n"


def component_metrics(models: Any, pool: Any) -> list[_Metric]:
    """Metrics read at scrape time from the loaded models' batchers (``stats()``) and the sandbox pool."""

    def batcher(attr: str) -> Callable[[], dict[Labels, float]]:
        def read() -> dict[Labels, float]:
            out = {}
            for name, policy in models.physical.items():
                stats = getattr(policy, "stats", None)
                if stats is not None:
                    out[(name,)] = float(getattr(stats(), attr))
            return out

        return read

    p = "metaagent_serve_"
    return [
        CallbackCounter(p + "batcher_calls_total", "Batched backend calls per model.", ("model",),
                        fn=batcher("backend_calls")),
        CallbackCounter(p + "batcher_requests_total", "Requests through the batcher per model.", ("model",),
                        fn=batcher("requests")),
        Gauge(p + "batcher_mean_batch_size", "Mean backend batch size since start.", ("model",),
              fn=batcher("mean_batch_size")),
        CallbackCounter(p + "sandbox_workers_total", "Sandbox worker processes started / replaced.", ("event",),
                        fn=lambda: {(k,): float(pool.counters[k]) for k in ("started", "replaced")}),
    ]  # fmt: skip
