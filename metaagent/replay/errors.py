"""The one error type of the replay tool."""

from __future__ import annotations

from metaagent.errors import MetaAgentError


class ReplayError(MetaAgentError, ValueError):
    """The replay tool cannot do what was asked; the message names the input and what to change."""
