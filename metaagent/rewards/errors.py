"""Errors of the reward layer.

A reward that cannot be computed raises one of these (or is recorded as an error in a
:class:`~metaagent.rollout.records.RewardRecord`); it is never turned into a silent 0.
"""

from __future__ import annotations


class RewardError(RuntimeError):
    """A reward could not be computed: checker timeout, runner crash, missing or malformed reference."""


class CheckTimeout(RewardError):
    """An equivalence check or a worker did not answer within its deadline."""


class TestsFormatError(RewardError, ValueError):
    """Code tests are in no known format; the message says which forms are accepted."""

    __test__ = False  # not a pytest test class


class RunnerError(RewardError):
    """The code runner itself failed (could not start the interpreter, harness crashed) - not the program."""
