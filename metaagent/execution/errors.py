"""Errors of the code-execution layer (test programs, helper processes).

A program that fails its tests is a result, not an error; these are raised when the machinery itself could
not give a verdict, so the caller can record the reward as an error instead of a silent 0.
"""

from __future__ import annotations

from metaagent.errors import MetaAgentError


class ExecutionError(MetaAgentError, RuntimeError):
    """Code could not be run to a verdict: runner crash, helper timeout, malformed tests."""


class CheckTimeout(ExecutionError):
    """A helper process (an equivalence check, a worker) did not answer within its deadline."""


class WorkerCrashed(ExecutionError):
    """A helper process died while handling a request."""


class TestsFormatError(ExecutionError, ValueError):
    """Code tests are in no known format; the message says which forms are accepted."""

    __test__ = False  # not a pytest test class


class RunnerError(ExecutionError):
    """The code runner itself failed (could not start the interpreter, harness crashed) - not the program."""
