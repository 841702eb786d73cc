"""Server metrics on ``prometheus_client`` (one registry per server), exposed at ``GET /metrics``:

- ``metaagent_serve_requests_total{route,status}``, ``metaagent_serve_request_duration_seconds{route}``
  (histogram), ``metaagent_serve_requests_in_flight``;
- ``metaagent_serve_tokens_total{role,kind}`` (kind = prompt | completion; role = designer | executor | judge);
- ``metaagent_serve_designs_total{valid}``, ``metaagent_serve_executions_total{status}`` (sandbox outcomes:
  ok, invalid, error, timeout, limit), ``metaagent_serve_reward_errors_total`` (rewards that could not be
  computed for tasks that carried a reference), ``metaagent_serve_selections_total{method}``,
  ``metaagent_serve_record_errors_total``;
- read from the running components at scrape time (:class:`CallbackMetric`): batcher calls and mean batch
  size per model, sandbox workers started and replaced, ``metaagent_serve_ready``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: request latency buckets in seconds (teams take from under a second to minutes)
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
PREFIX = "metaagent_serve_"

Labels = tuple[str, ...]


class CallbackMetric:
    """A gauge or counter whose samples are read from a component at scrape time: ``fn() -> {label values:
    value}``. ``name`` is the full metric name (counters end in ``_total``)."""

    def __init__(
        self, name: str, help: str, labelnames: Sequence[str], fn: Callable[[], dict[Labels, float]], *, counter: bool = False
    ) -> None:
        self.name, self.help, self.labelnames, self.fn, self.counter = name, help, list(labelnames), fn, counter

    def collect(self) -> Iterator[Any]:
        if self.counter:
            family: Any = CounterMetricFamily(self.name.removesuffix("_total"), self.help, labels=self.labelnames)
        else:
            family = GaugeMetricFamily(self.name, self.help, labels=self.labelnames)
        for labels, value in sorted(self.fn().items()):
            family.add_metric(list(labels), value)
        yield family


class Metrics:
    """The server's metrics in their own registry; component callbacks are attached once models load."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        p = PREFIX
        self.requests = Counter(p + "requests", "HTTP requests by route and status code.", ("route", "status"), registry=r)
        self.latency = Histogram(
            p + "request_duration_seconds", "Time to the last response byte.", ("route",), buckets=LATENCY_BUCKETS, registry=r
        )
        self.in_flight = Gauge(p + "requests_in_flight", "Team requests being served now.", registry=r)
        self.tokens = Counter(p + "tokens", "Tokens per logical role and kind.", ("role", "kind"), registry=r)
        self.designs = Counter(p + "designs", "Designs produced, by validity.", ("valid",), registry=r)
        self.executions = Counter(p + "executions", "Sandboxed executions by outcome.", ("status",), registry=r)
        self.reward_errors = Counter(p + "reward_errors", "Rewards that could not be computed.", registry=r)
        self.selections = Counter(p + "selections", "Answer selections by method.", ("method",), registry=r)
        self.record_errors = Counter(p + "record_errors", "Teams that could not be appended to --record.", registry=r)
        self._callbacks: dict[str, CallbackMetric] = {}
        self._lock = threading.Lock()

    def add_callback(self, metric: CallbackMetric) -> None:
        """Register (or replace, by name) a metric read at scrape time."""
        with self._lock:
            old = self._callbacks.pop(metric.name, None)
            if old is not None:
                self.registry.unregister(old)
            self._callbacks[metric.name] = metric
            self.registry.register(metric)

    def render(self) -> str:
        return generate_latest(self.registry).decode("utf-8")


def component_metrics(models: Any, pool: Any) -> list[CallbackMetric]:
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

    p = PREFIX
    return [
        CallbackMetric(p + "batcher_calls_total", "Batched backend calls per model.", ("model",),
                       batcher("backend_calls"), counter=True),
        CallbackMetric(p + "batcher_requests_total", "Requests through the batcher per model.", ("model",),
                       batcher("requests"), counter=True),
        CallbackMetric(p + "batcher_mean_batch_size", "Mean backend batch size since start.", ("model",),
                       batcher("mean_batch_size")),
        CallbackMetric(p + "sandbox_workers_total", "Sandbox worker processes started / replaced.", ("event",),
                       lambda: {(k,): float(pool.counters[k]) for k in ("started", "replaced")}, counter=True),
    ]  # fmt: skip
