"""The service behind the routes: load the models, admit requests, run teams on threads, record them.

One :class:`TeamService` per server. It owns what all requests share — one batcher per physical model
(:mod:`.models`), the sandbox pool, the template bank, the record writer, the metrics — and runs each team
(:func:`~metaagent.serve.team.run_team`) on a thread pool sized to the admission cap.

Life cycle: ``loading`` (weights load in a background thread; requests get 503) -> ``ready`` ->
``draining`` (on SIGTERM/SIGINT: new requests get 503, requests in flight finish) -> ``closed`` (teams
still running are cancelled: they make no new model calls). A load failure moves to ``failed`` (503 with
the reason; the CLI exits with status 1).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from metaagent.execution.isolation import ExecutionConfig, for_config
from metaagent.records import RolloutTree, TreeWriter
from metaagent.rollout.engine import FrozenDesign
from metaagent.workflow import SandboxPool, load_templates

from .config import ServeConfig
from .errors import ServeError, unavailable
from .metrics import CallbackMetric, Metrics, component_metrics
from .models import ServeModels, load_models
from .request_policy import RequestBudget
from .team import (
    ClientGone,
    EventSink,
    TeamContext,
    TeamResult,
    TeamSpec,
    frozen_preview,
    raise_if_unanswerable,
)
from .team import run_team as _run_team
from .validation import RequestValidator

log = logging.getLogger("metaagent.serve")

LOADING, READY, DRAINING, FAILED, CLOSED = "loading", "ready", "draining", "failed", "closed"
#: how often a waiting request checks whether its client is still connected
DISCONNECT_POLL_S = 0.25


class Admission:
    """A slot among the server's requests in flight; released once, when the team's thread is done."""

    def __init__(self, service: TeamService) -> None:
        self._service = service
        self._released = False
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._service._release()


class TeamService:
    """Everything the routes call. Thread-safe.

    Args:
        config: the server's configuration.
        loader: builds the models (default :func:`~metaagent.serve.models.load_models`); tests pass
            scripted policies here.
    """

    def __init__(self, config: ServeConfig, *, loader: Callable[[], ServeModels] | None = None) -> None:
        self.config = config
        self.isolation = for_config(ExecutionConfig(config.isolation), purpose="serve")
        self.metrics = Metrics()
        self.run_id = f"serve-{uuid.uuid4().hex[:12]}"
        self.created = int(time.time())
        self.state = LOADING
        self.error: str | None = None
        self.models: ServeModels | None = None
        self.pool: Any = None
        self.reward_config = config.reward_config()  # client-set test limits capped at the server's
        self.templates = load_templates()
        self.record_config = {"serve": config.public()}
        # a wrong --frozen-designer fails here, at start-up, not on the first request
        self.frozen = FrozenDesign.resolve(config.frozen_designer, self.templates) if config.frozen_designer else None
        self.frozen_design = frozen_preview(self.frozen) if self.frozen else None
        self.validator = RequestValidator(config, self.frozen.name if self.frozen else None)
        self._loader = loader or (lambda: load_models(config))
        self._lock = threading.Lock()
        self._in_flight = 0
        self._budgets: set[RequestBudget] = set()
        self._ready = threading.Event()
        self._loader_thread: threading.Thread | None = None
        self._writer: TreeWriter | None = None
        self._context: TeamContext | None = None
        self._threads = ThreadPoolExecutor(config.max_concurrent_requests, thread_name_prefix="metaagent-team")
        self.metrics.add_callback(
            CallbackMetric("metaagent_serve_ready", "1 when the model is loaded and requests are served.", (),
                           lambda: {(): 1.0 if self.state == READY else 0.0})
        )  # fmt: skip

    # ---- life cycle ---------------------------------------------------------------------------------------
    def load(self) -> None:
        """Load the models, start the sandbox workers and open the record file (blocking)."""
        t0 = time.perf_counter()
        try:
            models = self._loader()
            pool = SandboxPool(workers=self.config.sandbox_workers, limits=self.config.limits())
            pool.warm()
            writer = TreeWriter(self.config.record) if self.config.record else None
        except BaseException as e:
            with self._lock:
                self.state, self.error = FAILED, f"{type(e).__name__}: {e}"
            self._ready.set()
            raise
        context = TeamContext(
            config=self.config,
            models=models,
            pool=pool,
            templates=self.templates,
            reward_config=self.reward_config,
            run_id=self.run_id,
            record_config=self.record_config,
            frozen_design=self.frozen_design,
        )
        with self._lock:
            closed = self.state == CLOSED
            if not closed:
                self.models, self.pool, self._writer, self._context = models, pool, writer, context
                if self.state == LOADING:
                    self.state = READY
        if closed:  # shut down while loading: release what was built
            pool.close()
            models.close()
            if writer is not None:
                writer.close()
        else:
            for metric in component_metrics(models, pool):
                self.metrics.add_callback(metric)
            log.info("models %s ready in %.1f s", models.describe(), time.perf_counter() - t0)
        self._ready.set()

    def start(self, on_failure: Callable[[BaseException], None] | None = None) -> threading.Thread:
        """Load in a background thread, so the server answers (503) while the weights load. Idempotent."""
        if self._loader_thread is not None:
            return self._loader_thread

        def run() -> None:
            if self.state != LOADING:  # loaded synchronously already
                return
            try:
                self.load()
            except BaseException as e:  # noqa: BLE001 - reported through state and on_failure
                log.error("loading failed: %s: %s", type(e).__name__, e)
                if on_failure is not None:
                    on_failure(e)

        self._loader_thread = threading.Thread(target=run, name="metaagent-serve-load", daemon=True)
        self._loader_thread.start()
        return self._loader_thread

    def wait_ready(self, timeout: float | None = None) -> bool:
        self._ready.wait(timeout)
        return self.state == READY

    def begin_drain(self) -> None:
        """Refuse new requests (503); requests in flight continue."""
        with self._lock:
            changed = self.state in (LOADING, READY)
            if changed:
                self.state = DRAINING
        if changed:
            log.info("draining: %d request(s) in flight", self._in_flight)

    def close(self) -> None:
        """Cancel what is still running (no new model calls), wait for the team threads, release everything."""
        with self._lock:
            self.state = CLOSED
            budgets = list(self._budgets)
        for b in budgets:
            b.cancel("the server is shutting down")
        self._threads.shutdown(wait=True)
        if self.pool is not None:
            self.pool.close()
        if self.models is not None:
            self.models.close()
        if self._writer is not None:
            self._writer.close()

    def health(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": "ok" if self.state == READY else self.state, "in_flight": self._in_flight}
        if self.models is not None:
            out["models"] = self.models.describe()
        if self.frozen is not None:
            out["frozen_designer"] = self.frozen.name
        out["isolation"] = {"layer": self.isolation.layer, "covers": self.isolation.covers()}
        if self.error:
            out["error"] = self.error
        return out

    # ---- admission ----------------------------------------------------------------------------------------
    def admit(self) -> Admission:
        """A slot for one request, or 503 (not ready) / 429 (at the in-flight cap)."""
        cap = self.config.max_concurrent_requests
        with self._lock:
            if self.state == LOADING:
                raise unavailable("the model is still loading; retry in a few seconds", code="model_loading")
            if self.state == FAILED:
                raise ServeError(503, f"the model failed to load ({self.error}); see the server log",
                                 code="model_failed")  # fmt: skip
            if self.state != READY:
                raise unavailable("the server is shutting down", code="shutting_down")
            if self._in_flight >= cap:
                raise ServeError(
                    429,
                    f"the server is serving its limit of {cap} requests at once; retry shortly, or start it "
                    "with a larger --max-concurrent-requests",
                    code="too_many_requests",
                    headers={"Retry-After": "1"},
                )
            self._in_flight += 1
        self.metrics.in_flight.inc()
        return Admission(self)

    def _release(self) -> None:
        with self._lock:
            self._in_flight -= 1
        self.metrics.in_flight.dec()

    # ---- running ------------------------------------------------------------------------------------------
    async def run(
        self,
        spec: TeamSpec,
        admission: Admission,
        *,
        is_disconnected: Callable[[], Awaitable[bool]] | None = None,
    ) -> TeamResult:
        """Run a team on the service's threads; cancel it if the client goes away. Releases ``admission``."""
        budget = RequestBudget(self.config.request_timeout_s)
        future = self.submit(spec, budget, admission)
        while True:
            done, _ = await asyncio.wait({future}, timeout=DISCONNECT_POLL_S)
            if done:
                return future.result()
            if is_disconnected is not None and await is_disconnected():
                budget.cancel("the client disconnected")
                raise ClientGone()

    def submit(
        self, spec: TeamSpec, budget: RequestBudget, admission: Admission, emit: EventSink | None = None
    ) -> asyncio.Future[TeamResult]:
        """Start :meth:`run_team` on the team threads; ``admission`` is released when it ends."""
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._threads, self.run_team, spec, budget, emit)
        except RuntimeError:  # the executor was shut down
            admission.release()
            raise unavailable("the server is shutting down", code="shutting_down") from None
        future.add_done_callback(lambda _: admission.release())
        # mark the outcome as seen: an abandoned request's error must not be logged as "never retrieved"
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        return future

    def run_team(self, spec: TeamSpec, budget: RequestBudget, emit: EventSink | None = None) -> TeamResult:
        """Run one team (blocking), record it, count it; raise if there is nobody or nothing to answer."""
        context = self._context
        if context is None:
            raise unavailable("the model is not loaded", code="model_loading")
        with self._lock:
            self._budgets.add(budget)
        try:
            result = _run_team(context, spec, budget, emit)
        finally:
            with self._lock:
                self._budgets.discard(budget)
        self._record(result.tree)
        self._count(result)
        raise_if_unanswerable(result, budget)
        return result

    def _record(self, tree: RolloutTree) -> None:
        if self._writer is None:
            return
        try:
            self._writer.write(tree)
        except (OSError, ValueError) as e:  # a full disk must not fail the answer; it is logged and counted
            log.error("could not append the team to %s: %s", self.config.record, e)
            self.metrics.record_errors.inc()

    def _count(self, result: TeamResult) -> None:
        m = self.metrics
        for role, u in result.usage.by_role.items():
            m.tokens.labels(role=role, kind="prompt").inc(u.prompt_tokens)
            m.tokens.labels(role=role, kind="completion").inc(u.completion_tokens)
        for d in result.tree.designs:
            m.designs.labels(valid=str(d.valid).lower()).inc()
            for e in d.executions:
                m.executions.labels(status=e.status).inc()
                if e.reward is not None and e.reward.error is not None:
                    m.reward_errors.inc()
        if result.selection is not None:
            m.selections.labels(method=result.selection.method).inc()
