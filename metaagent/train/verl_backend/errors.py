"""The one error type of the verl backend."""

from __future__ import annotations

from metaagent.errors import MetaAgentError


class VerlBackendError(MetaAgentError, RuntimeError):
    """The verl backend cannot run this configuration or these inputs; the message says what to change."""
