"""Stop signals of the long-running commands (``train-metaagent``, ``metaagent-eval``): the one list of
signals and the scope that routes them to a handler.

A scope installs its ``_handle`` for every signal of :data:`STOP_SIGNALS` on entry and puts the previous
handlers back on exit. Python lets only the main thread install handlers, so a scope opened on any other thread
(a test's worker, an embedding application) installs nothing and leaves the host's handling as it was.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

#: the signals that stop a run or an evaluation cleanly (Ctrl-C and ``kill``'s default); the commands exit with
#: 128 + the signal's number, the shells' convention (130 for SIGINT, 143 for SIGTERM)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignalScope:
    """Routes :data:`STOP_SIGNALS` to :meth:`_handle` while open (main thread only); subclasses say what a
    signal does."""

    previous: dict[int, Any]

    def __enter__(self) -> Any:
        self.previous = {}
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        self.previous = {}

    def _handle(self, signum: int, frame: Any) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError
