"""Errors of the reward layer.

A reward that cannot be computed raises one of these (or is recorded as an error in a
:class:`~metaagent.records.RewardRecord`); it is never turned into a silent 0. Errors of running code
(:class:`TestsFormatError`, :class:`RunnerError`, :class:`CheckTimeout`) live in
:mod:`metaagent.execution.errors` and are re-exported here.
"""

from __future__ import annotations

from metaagent.errors import MetaAgentError
from metaagent.execution.errors import CheckTimeout, ExecutionError, RunnerError, TestsFormatError

__all__ = ["CheckTimeout", "ExecutionError", "RewardError", "RunnerError", "TestsFormatError"]


class RewardError(MetaAgentError, RuntimeError):
    """A reward could not be computed: missing or malformed reference, no verdict from a checker."""
