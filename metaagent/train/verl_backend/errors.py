"""The one error type of the verl backend."""

from __future__ import annotations

from metaagent.train.backend import BackendError


class VerlBackendError(BackendError):
    """The verl backend cannot run this configuration or these inputs; the message says what to change."""
