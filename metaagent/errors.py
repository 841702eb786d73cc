"""The one error base of metaagent.

Every error a user can cause or see derives from :class:`MetaAgentError`, so the command-line tools catch
that one type and print its message as one clean line (``--debug`` prints the traceback). The message says
what is wrong and how to fix it.
"""

from __future__ import annotations


class MetaAgentError(Exception):
    """Base of every user-facing metaagent error."""
