"""Killing a helper process and everything it started, and reading its CPU time and memory: the one
implementation behind the sandbox workers, the helper pools and the code-test runner. Every such process is
started with ``start_new_session=True``, so its process group id is its pid.

Deadlines of model code and of checkers are CPU time; the wall clock allows :data:`WALL_FACTOR` times as
much, and only stops a process that never gets the CPU to finish (a busy machine fails nothing)."""

from __future__ import annotations

import os
import signal
import subprocess

#: the wall clock allows this many times a CPU deadline (code tests, math checks)
WALL_FACTOR = 3.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``); None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime (fields 14 and 15 of stat)


def memory_kb(pid: int | str = "self") -> dict[str, int]:
    """``VmRSS`` / ``VmSize`` of process ``pid`` in KiB (Linux ``/proc/<pid>/status``; ``"self"``: this
    process); the fields that cannot be read are left out."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmSize"):
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


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
