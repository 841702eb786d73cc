"""The policy layer: every designer and executor call reaches a model through :class:`Policy`: model aliases
and their cache, chat rendering, the transformers decode loop with exact log-probs, request batching, the
OpenAI-compatible and vLLM backends, per-agent routing, and the one builder of served models.

Backends: :class:`HFPolicy` (local transformers), :class:`VLLMPolicy` (vLLM engine, GPU),
:class:`OpenAIPolicy` (OpenAI-compatible server), :class:`ScriptedPolicy` (tests). :class:`BatchingPolicy`
batches the calls of many threads; :class:`PolicyRegistry` maps logical roles to policies;
:func:`build_policy` builds any of them by name. Importing this package does not import torch,
transformers, openai or vllm: each is imported when a backend is built.
"""

from .base import (
    CapabilityError,
    ChatRequest,
    Completion,
    Policy,
    PolicyError,
    RequestError,
    SamplingParams,
    Usage,
    validate_messages,
)
from .batcher import BatcherStats, BatchingPolicy
from .factory import BACKENDS, MODEL_BACKENDS, build_policy, build_registry
from .hf import HFPolicy
from .models import cache_dir, load_model_and_tokenizer, load_tokenizer, resolve_model
from .openai_backend import OpenAIPolicy
from .registry import PolicyRegistry, RoutingPolicy
from .scripted import ScriptedPolicy
from .vllm_backend import VLLMPolicy

__all__ = [
    "BACKENDS",
    "MODEL_BACKENDS",
    "BatcherStats",
    "BatchingPolicy",
    "CapabilityError",
    "ChatRequest",
    "Completion",
    "HFPolicy",
    "OpenAIPolicy",
    "Policy",
    "PolicyError",
    "PolicyRegistry",
    "RequestError",
    "RoutingPolicy",
    "SamplingParams",
    "ScriptedPolicy",
    "Usage",
    "VLLMPolicy",
    "build_policy",
    "build_registry",
    "cache_dir",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "resolve_model",
    "validate_messages",
]
