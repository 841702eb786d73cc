"""The one builder of policies (and role registries) from config values: ``build_policy("hf", "embedded")``.

Every physical model the package serves is built here: the trainer's rollout models (a loaded model object
it trains in place, ``build_policy("hf", model, tokenizer=tok, batching=True, ...)``), the team server's, the
evaluator's, the coach's, verl's CPU rollout, replay's and distillation's. Weights are read by
:func:`metaagent.policy.models.load_model_and_tokenizer` (through :class:`~metaagent.policy.hf.HFPolicy`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from metaagent.registry import Registry

from .base import Policy
from .batcher import BatchingPolicy
from .hf import HFPolicy
from .openai_backend import OpenAIPolicy
from .registry import PolicyRegistry
from .scripted import ScriptedPolicy
from .vllm_backend import VLLMPolicy

#: backend name -> its builder ``(model, **options) -> Policy``; plugins: entry points of the group
#: ``metaagent.policy_backends``. A builder's ``accepts`` (``"module:Class"``) names the class whose constructor
#: lists the options it takes, checked before anything is built
Builder = Callable[..., Policy]
BACKENDS: Registry[Builder] = Registry("policy backend", ValueError, group="metaagent.policy_backends")


def register_policy_backend(name: str, accepts: str | None = None) -> Callable[[Builder], Builder]:
    """Decorator: register a policy builder under ``name`` (``accepts``: the ``module:Class`` of its options)."""

    def decorator(fn: Builder) -> Builder:
        if accepts is not None:
            fn.accepts = accepts  # type: ignore[attr-defined]
        return BACKENDS.register(name)(fn)

    return decorator


@register_policy_backend("hf", accepts="metaagent.policy.hf:HFPolicy")
def _hf(model: Any, **options: Any) -> Policy:
    return HFPolicy(model, **options)


@register_policy_backend("vllm", accepts="metaagent.policy.vllm_backend:VLLMPolicy")
def _vllm(model: str, **options: Any) -> Policy:
    return VLLMPolicy(model, **options)


@register_policy_backend("openai", accepts="metaagent.policy.openai_backend:OpenAIPolicy")
def _openai(model: str, **options: Any) -> Policy:
    if "base_url" not in options:
        raise ValueError(
            "the 'openai' backend needs base_url=..., the server's OpenAI-compatible root "
            "(e.g. http://127.0.0.1:8000/v1)"
        )
    return OpenAIPolicy(options.pop("base_url"), model, **options)


@register_policy_backend("scripted", accepts="metaagent.policy.scripted:ScriptedPolicy")
def _scripted(model: str, **options: Any) -> Policy:
    if "replies" not in options:
        raise ValueError("the 'scripted' backend needs replies=[...] (strings) or a callable request -> str")
    return ScriptedPolicy(options.pop("replies"), model_id=model or "scripted", **options)


#: the backends a run's config may name for a model (``scripted`` answers from a list or a function: tests, rules;
#: a plugin's is built by ``build_policy``: train, serve and eval treat each of these three in their own way)
MODEL_BACKENDS: tuple[str, ...] = ("hf", "vllm", "openai")
#: options handled here rather than by a backend constructor (those of the BatchingPolicy in front)
BATCHING_OPTIONS = ("batching", "batch_size", "max_wait_s", "max_in_flight")
#: continuous batching: requests in flight to one local policy, per row it decodes at once (the rest queue)
CONTINUOUS_IN_FLIGHT = 4


def batcher_options(max_batch_size: int, continuous: bool) -> dict[str, int]:
    """The batcher in front of a local (hf) policy, as ``build_policy`` options (``batching=True`` with them).

    Continuous: every request is its own backend call (``batch_size`` 1), admitted into the running batch as
    it arrives and returned as soon as its own row is done; ``CONTINUOUS_IN_FLIGHT x max_batch_size`` calls
    may be in flight (the decoder holds ``max_batch_size`` rows, the rest queue there). Grouping requests into
    one backend call instead would make each caller wait for the longest row of its group. Static: the
    requests that arrive together form one batch of up to ``max_batch_size``, run to the end, one at a time.
    """
    if continuous:
        return {"batch_size": 1, "max_in_flight": CONTINUOUS_IN_FLIGHT * max_batch_size}
    return {"batch_size": max_batch_size, "max_in_flight": 1}


def _accepted_options(target: str) -> list[str] | None:
    module, cls = target.split(":")
    try:
        sig = inspect.signature(getattr(__import__(module, fromlist=[cls]), cls).__init__)
    except Exception:  # noqa: BLE001 - a backend whose import fails reports that itself when built
        return None
    params = [p for p in sig.parameters.values() if p.name != "self"]
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None  # takes **kwargs: anything goes
    return [p.name for p in params if p.kind is not p.VAR_POSITIONAL]


def build_policy(backend: str, model: Any, **options: Any) -> Policy:
    """Build a policy backend by name.

    Args:
        backend: ``"hf"``, ``"vllm"``, ``"openai"``, ``"scripted"`` or a plugin's (:data:`BACKENDS`).
        model: model alias/path (hf, vllm), served model name (openai), or model id (scripted); for ``hf`` also
            a loaded ``PreTrainedModel`` (with ``tokenizer=``), which the policy serves as it is trained.
        options: passed to the backend's constructor, plus ``batching=True`` to wrap the backend in a
            :class:`~metaagent.policy.batcher.BatchingPolicy` (closing it closes the backend): ``batch_size``
            caps the batcher's batches (default: the backend's ``max_batch_size`` when given), ``max_wait_s``
            and ``max_in_flight`` configure it.
    """
    builder = BACKENDS.get(backend)
    target = getattr(builder, "accepts", None)
    batching = bool(options.pop("batching", False))
    given = {k: options.pop(k) for k in BATCHING_OPTIONS[1:] if k in options}
    if given and not batching:
        raise ValueError(f"{sorted(given)} only apply with batching=True")
    batch_options = {"max_batch_size" if k == "batch_size" else k: v for k, v in given.items()}
    accepted = _accepted_options(target) if target is not None else None
    if accepted is not None:
        unknown = sorted(set(options) - set(accepted) - {"model"})
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown} for the {backend!r} backend; accepted: "
                f"{sorted(set(accepted) - {'model'}) + list(BATCHING_OPTIONS)}"
            )
    policy = builder(model, **options)
    if batching:
        if "max_batch_size" in options:
            batch_options.setdefault("max_batch_size", options["max_batch_size"])
        policy = BatchingPolicy(policy, close_backend=True, **batch_options)
    return policy


def build_registry(roles: Mapping[str, Mapping[str, Any]]) -> PolicyRegistry:
    """Build a :class:`PolicyRegistry` from ``role -> {"backend": ..., "model": ..., **options}``.

    Roles with identical specs share one physical policy, so ``designer`` and ``executor`` with the same
    backend and model are one set of weights. For separate weights of the same model, give the specs
    different ``instance`` labels (the label only tells specs apart; it is not passed to the backend)::

        build_registry({"designer": {"backend": "hf", "model": "embedded"},
                        "executor": {"backend": "hf", "model": "embedded"}})   # shared
        build_registry({"designer": {"backend": "hf", "model": "embedded", "instance": "d"},
                        "executor": {"backend": "hf", "model": "embedded", "instance": "e"}})  # separate
    """
    built: dict[str, Policy] = {}
    mapping: dict[str, Policy] = {}
    for role, spec in roles.items():
        if not isinstance(spec, Mapping) or "backend" not in spec or "model" not in spec:
            raise ValueError(
                f"roles[{role!r}] must be a mapping with 'backend' and 'model' (and backend options), got {spec!r}"
            )
        opts = {k: v for k, v in spec.items() if k not in ("backend", "model", "instance")}
        key = json.dumps(dict(spec), sort_keys=True, default=repr)
        if key not in built:
            built[key] = build_policy(spec["backend"], spec["model"], **opts)
        mapping[role] = built[key]
    return PolicyRegistry(mapping)
