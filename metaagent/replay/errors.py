"""The one error type of the replay tool."""

from __future__ import annotations


class ReplayError(ValueError):
    """The replay tool cannot do what was asked; the message names the input and what to change."""
