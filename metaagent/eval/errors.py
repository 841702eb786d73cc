"""Errors of the evaluation harness."""

from __future__ import annotations

from metaagent.errors import MetaAgentError


class EvalError(MetaAgentError, ValueError):
    """An evaluation cannot run as asked (unknown method, template or benchmark, k > n, an unreachable
    endpoint, a missing dataset); the message says what is wrong and how to fix it."""
