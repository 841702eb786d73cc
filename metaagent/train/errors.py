"""The training run's error type (a backend's own is :class:`metaagent.train.backend.BackendError`)."""

from __future__ import annotations

from metaagent.errors import MetaAgentError


class TrainError(MetaAgentError, RuntimeError):
    """The run cannot start or continue; the message says why and what to do."""
