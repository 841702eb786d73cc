"""The policy layer: every designer and executor call reaches a model through :class:`Policy`."""

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
from .scripted import ScriptedPolicy

__all__ = [
    "CapabilityError",
    "ChatRequest",
    "Completion",
    "Policy",
    "PolicyError",
    "RequestError",
    "SamplingParams",
    "ScriptedPolicy",
    "Usage",
    "validate_messages",
]
