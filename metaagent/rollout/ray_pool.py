"""Sandbox workers and code tests as Ray actors: the same ``pool.run`` interface as ``SandboxPool``.

    driver (owns the policy)                    Ray cluster
    ───────────────────────                     ───────────
    RaySandboxPool.run(script, task, policy) ─► SandboxActor.run  (a local SandboxPool on that node;
                                                │                  tools and the reward run there too)
    relay threads ◄── PolicyBridge.take ◄───────┤ agent call: PolicyBridge.call (blocks)
    policy.generate(requests) ─► PolicyBridge.give ─► reply to the waiting call

The model stays in the driver (the local trainer updates it in place); only chat requests and
completions cross the network. With a vLLM server behind an OpenAI-compatible endpoint the same relay
applies, or actors may be given the endpoint directly. The task rewards registered in the driver
(``register_reward``, ``data.rewards``) go with each run and score on the actor as they would in the driver
(:func:`~metaagent.rewards.task_reward.reward_bundle`).

Placement (``rollout.ray_placement``, ``rollout.ray_resource``): the sandbox actors ask for no CPU and are
pinned (hard node affinity) round-robin to the cluster's alive nodes that can host them when the pool starts
(:func:`spread_nodes`), or placed by Ray's default policy; with a resource name each actor also asks for one
unit of it, so only nodes started with ``--resources='{"<name>": k}'`` host sandbox actors, k at most on each.
The bridge stays on the driver's node. Every execution record names the Ray node that ran it
(``Execution.node``), and the pool's ``nodes`` lists each actor's node.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from metaagent.data.tasks import Task
from metaagent.errors import MetaAgentError
from metaagent.policy.base import ChatRequest, Completion, Policy, PolicyError, SamplingParams
from metaagent.records import Execution
from metaagent.rewards import RewardConfig, score_execution
from metaagent.rewards.task_reward import load_rewards, reward_bundle
from metaagent.rollout.config import RAY_PLACEMENTS
from metaagent.workflow import SandboxPool
from metaagent.workflow.tools import default_tools

#: seconds the pool waits for its actors to be placed and started before it names what could not be placed
ACTOR_START_TIMEOUT_S = 600.0
#: seconds an actor pinned to a node the cluster lists alive is started again while the scheduler refuses it
NODE_VIEW_GRACE_S = 30.0


class RayPoolError(MetaAgentError, RuntimeError):
    """The Ray sandbox pool cannot place its actors on this cluster."""


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
    """One node-local SandboxPool; runs the script, its tools and (optionally) its reward on that node, with
    the task rewards registered in the driver (:func:`~metaagent.rewards.task_reward.reward_bundle`)."""

    def __init__(self, bridge: Any, slots: int) -> None:
        import ray

        self._bridge = bridge
        self._pool = SandboxPool(workers=slots)
        self._node = ray.get_runtime_context().get_node_id()
        self._rewards: dict[str, Any] = {}
        self._rewards_key: str | None = None
        self._rewards_lock = threading.Lock()  # a threaded actor: concurrent runs unpack a new bundle once

    def node(self) -> str:
        """The Ray node id of this actor."""
        return self._node

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
        rewards: dict[str, Any] | None = None,
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
            config = RewardConfig(**reward_config)
            execution.reward = score_execution(t, execution, config, rewards=self._task_rewards(rewards))
        execution.node = self._node
        return execution.to_dict()

    def _task_rewards(self, bundle: dict[str, Any] | None) -> dict[str, Any]:
        """The driver's task rewards, unpacked from ``bundle`` when it differs from the last one."""
        if bundle is None:
            return {}
        with self._rewards_lock:
            if bundle["key"] != self._rewards_key:
                self._rewards, self._rewards_key = load_rewards(bundle), bundle["key"]
            return self._rewards

    def close(self) -> None:
        self._pool.close()


class RaySandboxPool:
    """``SandboxPool``'s interface over Ray actors.

    Args:
        address: a Ray address, or "local" to start (or join) a Ray instance on this machine.
        workers: number of sandbox actors.
        slots_per_actor: concurrent executions per actor (each is one sandbox worker process there).
        reward_config: when given, executions are scored on the actors (code tests run there), with the task
            rewards registered in this process at each run (``register_reward``, ``data.rewards``) sent along.
        relay_threads: driver threads serving agent calls (each blocks on ``policy.generate``).
        placement: "spread" (the actors pinned round-robin to the cluster's alive nodes: :func:`spread_nodes`)
            or "default" (Ray's default policy: zero-CPU actors mostly stay on the driver's node).
        resource: a custom resource name; each actor asks for one unit of it, so only the nodes that advertise
            it host actors (``ray start --resources='{"<name>": k}'``: k actors at most there).
    """

    def __init__(
        self,
        address: str = "local",
        workers: int = 2,
        *,
        slots_per_actor: int = 4,
        reward_config: Any = None,
        relay_threads: int = 64,
        placement: str = "spread",
        resource: str | None = None,
    ) -> None:
        if placement not in RAY_PLACEMENTS:
            raise RayPoolError(f"rollout.ray_placement must be one of {RAY_PLACEMENTS}, got {placement!r}")
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
        targets = actor_targets(ray.nodes(), workers, placement, resource or None)

        concurrency = max(1, workers) * slots_per_actor + 8
        # the bridge relays every agent call to this process: on the driver's node (soft: anywhere if it cannot)
        here = _node_affinity(ray.get_runtime_context().get_node_id(), soft=True)
        self._bridge = (
            ray.remote(_PolicyBridge)
            .options(max_concurrency=concurrency + 8, num_cpus=0, scheduling_strategy=here)
            .remote()
        )
        self._actor_cls = ray.remote(_SandboxActor)
        self._asks = {"max_concurrency": slots_per_actor, "num_cpus": 0}
        if resource:
            self._asks["resources"] = {resource: 1}
        self._slots, self._targets, self._placement = slots_per_actor, targets, placement
        self._actors = [self._start_actor(i) for i in range(workers)]
        try:
            self.nodes: list[str] = self._placed(resource)  # each actor's node id, by actor
        except BaseException:
            for handle in (*self._actors, self._bridge):
                ray.kill(handle)
            raise
        self._next = 0
        self._policies: dict[str, Policy] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._relay = ThreadPoolExecutor(max_workers=relay_threads, thread_name_prefix="ray-relay")
        self._poller = threading.Thread(target=self._poll, name="ray-bridge-poller", daemon=True)
        self._poller.start()

    def _start_actor(self, i: int) -> Any:
        """Actor ``i``; spread pins it hard to its node: a soft pin falls back to the driver's node whenever
        the driver's raylet does not see the target's resources yet (all executions of a measured run landed
        there), and Ray's own "SPREAD" is best effort per raylet too."""
        spread = self._placement == "spread"
        strategy = _node_affinity(self._targets[i], soft=False) if spread else "DEFAULT"
        actor = self._actor_cls.options(**self._asks, scheduling_strategy=strategy)
        return actor.remote(self._bridge, self._slots)

    def _placed(self, resource: str | None) -> list[str]:
        """Each actor's Ray node id, once every actor has started: a clear error instead of a silent hang, or
        of Ray's actor error when a pinned node left the cluster. A hard pin to a node the cluster lists alive
        but the scheduling raylet does not know yet is refused at once; such an actor is started again for up
        to ``NODE_VIEW_GRACE_S``."""
        asks = f"0 CPU and 1 {resource!r}" if resource is not None else "0 CPU"
        unschedulable = (self._ray.exceptions.RayActorError, self._ray.exceptions.ActorUnschedulableError)
        start = time.monotonic()
        nodes: list[str] = []
        for i in range(len(self._actors)):
            while True:
                left = ACTOR_START_TIMEOUT_S - (time.monotonic() - start)
                try:
                    nodes.append(self._ray.get(self._actors[i].node.remote(), timeout=max(left, 0.0)))
                    break
                except self._ray.exceptions.GetTimeoutError:
                    raise RayPoolError(
                        f"{len(self._actors)} sandbox actors (each asking {asks}, rollout.ray_placement="
                        f"{self._placement}) did not all start within {ACTOR_START_TIMEOUT_S:.0f} s; "
                        "check `ray status` for dead or missing nodes"
                    ) from None
                except unschedulable as e:
                    target = self._targets[i] if self._placement == "spread" else None
                    alive = {n["NodeID"] for n in self._ray.nodes() if n.get("Alive")}
                    if target in alive and time.monotonic() - start < NODE_VIEW_GRACE_S:
                        time.sleep(1.0)
                        self._ray.kill(self._actors[i])
                        self._actors[i] = self._start_actor(i)
                        continue
                    pinned = f" pinned to node {target}" if target else ""
                    raise RayPoolError(
                        f"sandbox actor {i} (asking {asks}{pinned}) could not start: {type(e).__name__}; "
                        "did a node leave the cluster while the pool started? check `ray status` and start "
                        "the run again"
                    ) from e
        return nodes

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
                None if self._reward is None else reward_bundle(),
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


def _node_affinity(node_id: str, *, soft: bool) -> Any:
    """Ray's node-affinity scheduling strategy for ``node_id`` (hard, or soft: elsewhere when that node cannot
    take it). The one import of ``ray.util.scheduling_strategies``, made when a pool starts: Ray is heavy and
    optional, so importing this module must not load it."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id, soft=soft)


def actor_targets(
    nodes: list[Mapping[str, Any]], workers: int, placement: str, resource: str | None
) -> list[str]:
    """The node id each of ``workers`` actors is pinned to: :func:`spread_nodes` with placement "spread", none
    with "default" (Ray places them). With a ``resource`` the default placement still checks that the alive
    nodes advertise a unit for every actor (:func:`node_capacity`), since actors asking for more than the
    cluster has would wait forever."""
    if placement == "spread":
        return spread_nodes(nodes, workers, resource)
    if resource is not None:
        node_capacity(nodes, workers, resource)
    return []


def node_capacity(
    nodes: list[Mapping[str, Any]], workers: int, resource: str | None = None
) -> dict[str, int]:
    """How many of ``workers`` actors each alive node of ``nodes`` (``ray.nodes()`` rows, in their order) can
    host: every one without ``resource``, else its amount of it. Raises :class:`RayPoolError` when no node is
    alive or the nodes together cannot take them all."""
    alive = [n for n in nodes if n.get("Alive", n.get("alive", False))]
    if not alive:
        raise RayPoolError("the Ray cluster lists no alive node to place sandbox actors on; check `ray status`")
    if resource is None:
        return {n["NodeID"]: workers for n in alive}
    capacity = {n["NodeID"]: int(n.get("Resources", {}).get(resource, 0)) for n in alive}
    if sum(capacity.values()) < workers:
        have = sum(capacity.values())
        raise RayPoolError(
            f"rollout.ray_resource={resource!r}: the cluster's alive nodes advertise {have} of it, but "
            f"rollout.sandbox_workers={workers} actors ask for one unit each; start the sandbox nodes with "
            f"ray start --resources='{{\"{resource}\": <actors there>}}', or lower rollout.sandbox_workers"
        )
    return capacity


def spread_nodes(nodes: list[Mapping[str, Any]], workers: int, resource: str | None = None) -> list[str]:
    """The node id of each of ``workers`` actors: round-robin over the alive ``nodes`` (``ray.nodes()`` rows,
    in their order), or, with ``resource``, over the nodes that advertise it, each taking at most its amount of
    it (a node whose amount is used up is passed over). Raises :class:`RayPoolError` when the cluster cannot
    take them all (hard-pinned actors would wait forever): :func:`node_capacity`."""
    capacity = node_capacity(nodes, workers, resource)
    placed: list[str] = []
    used = dict.fromkeys(capacity, 0)
    while len(placed) < workers:
        for node, cap in capacity.items():
            if len(placed) < workers and used[node] < cap:
                placed.append(node)
                used[node] += 1
    return placed


def _as_dict(obj: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    return dict(obj)
