"""Killing a helper process and everything it started: the one implementation behind the sandbox
workers, the helper pools and the code-test runner. Every such process is started with
``start_new_session=True``, so its process group id is its pid."""

from __future__ import annotations

import os
import signal
import subprocess


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` (a process started in its own session); gone already is fine."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_process(proc: subprocess.Popen, wait_s: float | None = 5.0) -> int | None:
    """Kill ``proc``'s whole process group (``proc.kill()`` if that is refused) and reap it; returns its exit
    code, or None if it did not exit within ``wait_s`` (None waits forever)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:
            proc.kill()
    try:
        return proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return None
