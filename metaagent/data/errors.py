"""Errors of the data layer."""

from __future__ import annotations

from metaagent.errors import MetaAgentError


class DataError(MetaAgentError, ValueError):
    """A dataset cannot be loaded as asked; the message says what to change."""


class SkipRow(Exception):
    """A dataset row is left out (no tests, needs images, filtered out); the message is the reason."""
