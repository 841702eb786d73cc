"""Sandbox workers and code tests as Ray actors: the same ``pool.run`` interface as ``SandboxPool``.

    driver (owns the policy)                    Ray cluster
    ───────────────────────                     ───────────
    RaySandboxPool.run(script, task, policy) ─► SandboxActor.run  (a local SandboxPool on that node;
                                                │                  tools and the reward run there too)
    relay threads ◄── PolicyBridge.take ◄───────┤ agent call: PolicyBridge.call (blocks)
    policy.generate(requests) ─► PolicyBridge.give ─► reply to the waiting call

The model stays in the driver (the local trainer updates it in place); only chat requests and
completions cross the network. With a vLLM server behind an OpenAI-compatible endpoint the same relay
applies, or actors may be given the endpoint directly.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from metaagent.data.tasks import Task
from metaagent.policy.base import ChatRequest, Completion, Policy, PolicyError, SamplingParams
from metaagent.records import Execution
from metaagent.rewards import RewardConfig, score_execution
from metaagent.workflow import SandboxPool
from metaagent.workflow.tools import default_tools


class _PolicyBridge:
    """Threaded actor: sandbox actors block in ``call``; the driver serves requests via ``take``/``give``."""

    def __init__(self) -> None:
        self._pending: queue.Queue = queue.Queue()
        self._events: dict[str, threading.Event] = {}
        self._replies: dict[str, tuple[bool, Any]] = {}
        self._lock = threading.Lock()

    def call(self, job_id: str, requests: list[ChatRequest]) -> list[Completion]:
        call_id = uuid.uuid4().hex
        event = threading.Event()
        with self._lock:
            self._events[call_id] = event
        self._pending.put((call_id, job_id, requests))
        event.wait()
        with self._lock:
            ok, value = self._replies.pop(call_id)
            del self._events[call_id]
        if not ok:
            raise PolicyError(value)
        return value

    def take(self, timeout_s: float = 0.2, max_items: int = 256) -> list[tuple[str, str, list[ChatRequest]]]:
        items = []
        try:
            items.append(self._pending.get(timeout=timeout_s))
            while len(items) < max_items:
                items.append(self._pending.get_nowait())
        except queue.Empty:
            pass
        return items

    def give(self, call_id: str, ok: bool, value: Any) -> None:
        with self._lock:
            self._replies[call_id] = (ok, value)
            event = self._events.get(call_id)
        if event is not None:
            event.set()


class _BridgePolicy(Policy):
    """Inside a sandbox actor: forwards agent calls to the driver through the bridge."""

    def __init__(self, bridge: Any, job_id: str, model_id: str) -> None:
        super().__init__()
        self._bridge, self._job_id, self.model_id = bridge, job_id, model_id

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        import ray

        return ray.get(self._bridge.call.remote(self._job_id, requests))


class _SandboxActor:
    """One node-local SandboxPool; runs the script, its tools and (optionally) its reward on that node."""

    def __init__(self, bridge: Any, slots: int) -> None:
        self._bridge = bridge
        self._pool = SandboxPool(workers=slots)

    def run(
        self,
        job_id: str,
        model_id: str,
        source: str,
        task: dict[str, Any],
        limits: Mapping[str, Any] | None,
        sampling: dict[str, Any] | None,
        seed: int | None,
        reward_config: dict[str, Any] | None,
    ) -> dict[str, Any]:
        t = Task.coerce(task)
        execution = self._pool.run(
            source,
            t,
            _BridgePolicy(self._bridge, job_id, model_id),
            limits,
            sampling=SamplingParams(**sampling) if sampling else None,
            tools=default_tools(t),
            seed=seed,
        )
        if reward_config is not None:
            execution.reward = score_execution(t, execution, RewardConfig(**reward_config))
        return execution.to_dict()

    def close(self) -> None:
        self._pool.close()


class RaySandboxPool:
    """``SandboxPool``'s interface over Ray actors.

    Args:
        address: a Ray address, or "local" to start (or join) a Ray instance on this machine.
        workers: number of sandbox actors.
        slots_per_actor: concurrent executions per actor (each is one sandbox worker process there).
        reward_config: when given, executions are scored on the actors (code tests run there).
        relay_threads: driver threads serving agent calls (each blocks on ``policy.generate``).
    """

    def __init__(
        self,
        address: str = "local",
        workers: int = 2,
        *,
        slots_per_actor: int = 4,
        reward_config: Any = None,
        relay_threads: int = 64,
    ) -> None:
        try:
            import ray
        except ImportError as e:  # pragma: no cover - ray is a dependency
            raise RuntimeError("rollout.ray_address needs the 'ray' package: pip install ray") from e
        if not ray.is_initialized():
            ray.init(
                address=None if address == "local" else address,
                include_dashboard=False,
                ignore_reinit_error=True,
                log_to_driver=False,
                configure_logging=False,
            )
        self._ray = ray
        self._reward = None if reward_config is None else _as_dict(reward_config)
        concurrency = max(1, workers) * slots_per_actor + 8
        self._bridge = ray.remote(_PolicyBridge).options(max_concurrency=concurrency + 8).remote()
        actor_cls = ray.remote(_SandboxActor).options(max_concurrency=slots_per_actor, num_cpus=0)
        self._actors = [actor_cls.remote(self._bridge, slots_per_actor) for _ in range(workers)]
        self._next = 0
        self._policies: dict[str, Policy] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._relay = ThreadPoolExecutor(max_workers=relay_threads, thread_name_prefix="ray-relay")
        self._poller = threading.Thread(target=self._poll, name="ray-bridge-poller", daemon=True)
        self._poller.start()

    def run(
        self,
        source: str,
        task: Task | Mapping[str, Any] | str,
        policy: Policy,
        limits: Mapping[str, Any] | None = None,
        *,
        sampling: SamplingParams | None = None,
        tools: Mapping[str, Callable[..., str]] | None = None,  # tools are rebuilt on the actor
        seed: int | None = None,
    ) -> Execution:
        job_id = uuid.uuid4().hex
        with self._lock:
            self._policies[job_id] = policy
            actor = self._actors[self._next % len(self._actors)]
            self._next += 1
        try:
            t = Task.coerce(task)
            ref = actor.run.remote(
                job_id,
                policy.model_id,
                source,
                t.to_dict(),
                _as_dict(limits) if limits is not None else None,
                _as_dict(sampling) if sampling is not None else None,
                seed,
                self._reward,
            )
            return Execution.from_dict(self._ray.get(ref))
        finally:
            with self._lock:
                self._policies.pop(job_id, None)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                items = self._ray.get(self._bridge.take.remote(0.2))
            except Exception:  # ray shutting down
                if self._stop.is_set():
                    return
                continue
            for call_id, job_id, requests in items:
                self._relay.submit(self._serve, call_id, job_id, requests)

    def _serve(self, call_id: str, job_id: str, requests: list[ChatRequest]) -> None:
        with self._lock:
            policy = self._policies.get(job_id)
        try:
            if policy is None:
                raise PolicyError(f"no policy registered for job {job_id} (the run was cancelled)")
            value, ok = policy.generate(requests), True
        except Exception as e:
            value, ok = f"{type(e).__name__}: {e}", False
        self._bridge.give.remote(call_id, ok, value)

    def close(self) -> None:
        self._stop.set()
        self._poller.join(timeout=5)
        for a in self._actors:
            try:
                self._ray.get(a.close.remote(), timeout=30)
            except Exception:
                pass
            self._ray.kill(a)
        self._ray.kill(self._bridge)
        self._relay.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> RaySandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _as_dict(obj: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    return dict(obj)
