"""The isolation layer for model-written code: which kernel mechanism confines it, chosen once per process.

Every process that runs model-written code confines itself before running it (the child side,
:mod:`._confine`): the code-test harness (programs under test, also those of the workflow tools
``run_tests`` / ``run_program``) and the workflow sandbox workers. This module decides the layer and the
paths:

* ``landlock`` (strongest): Landlock (reads only the Python installation and the system libraries, writes
  only the process's own fresh temporary directory, no TCP bind/connect, no signals out of the domain),
  plus, where the kernel allows it, a mount namespace (the temporary directory is a size-limited tmpfs);
* ``namespaces``: mount namespace with every mount read-only except the tmpfs temporary directory, and
  an empty network namespace; reads are NOT restricted;
* ``none``: only the rlimits, clean environment, process-group kill and Python-level guards.

Both real layers also drop every capability and install a seccomp filter (no new processes, no execve,
no socket(), signals only to itself, no chmod/chown/xattr). ``auto`` picks the strongest layer that works
here; :func:`configure` logs the choice, and :func:`describe` is what ``run.json`` and ``/healthz`` record.

Config: ``execution.isolation: auto | landlock | namespaces | none`` (:class:`ExecutionConfig`). The
choice is also exported as ``METAAGENT_ISOLATION`` so helper processes started later (data loaders, Ray
workers) make the same one.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from metaagent.config import ConfigError

from .errors import ExecutionError

log = logging.getLogger(__name__)

ISOLATION_MODES = ("auto", "landlock", "namespaces", "none")
LAYERS_BY_STRENGTH = ("landlock", "namespaces", "none")
ENV_VAR = "METAAGENT_ISOLATION"
CHILD_DIR = str(Path(__file__).resolve().parent)  # where _confine.py lives (the harness imports it from here)
#: the oldest Landlock ABI used as a layer: 3 is the first that refuses truncating a file
MIN_LANDLOCK_ABI = 3
#: system paths a Python program needs to read (shared libraries, locale, time zones, certificates)
SYSTEM_READ_PATHS = (
    "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin",
    "/etc/ld.so.cache", "/etc/localtime",
    "/etc/ssl", "/etc/ca-certificates", "/etc/mime.types", "/proc/self",
)  # fmt: skip
HOW_TO_ACCEPT = (
    "set execution.isolation=none to run model-written code with only rlimits and Python guards (accept the "
    "risk: run on a machine or container that holds nothing you could not lose)"
)


class IsolationError(ExecutionError):
    """The requested isolation layer is not available here (the message says what is missing)."""


@dataclass
class ExecutionConfig:
    """How model-written code is isolated (``execution.*``).

    ``isolation``: ``auto`` (the strongest available: landlock > namespaces > none), or one layer by name
    (an error when it is not available). ``scratch_mb``: size of each test program's temporary directory
    when it is a tmpfs (mount namespaces available); writing more fails with ENOSPC.
    """

    isolation: str = "auto"  # kernel isolation of model-written code: auto | landlock | namespaces | none
    scratch_mb: int = 64  # size of each test program's temporary directory (a tmpfs) in MB

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATION_MODES:
            raise ConfigError(f"execution.isolation must be one of {ISOLATION_MODES}, got {self.isolation!r}")
        if self.scratch_mb < 1:
            raise ConfigError(f"execution.scratch_mb must be >= 1, got {self.scratch_mb}")


@dataclass(frozen=True)
class Isolation:
    """The layer in force in this process and what the kernel offers."""

    layer: str  # landlock | namespaces | none
    requested: str  # what the config asked for
    landlock_abi: int
    namespaces: bool  # mount + network namespaces can be created here
    scratch_mb: int = 64
    reason: str = ""  # why a weaker layer than landlock (empty when landlock)

    def child_spec(self, scratch: str | None, extra_read: tuple[str, ...] = ()) -> dict[str, Any] | None:
        """The keyword arguments of :func:`._confine.confine` for a child process (None: layer none)."""
        if self.layer == "none":
            return None
        return {
            "layer": self.layer,
            "read_paths": list(read_paths()) + list(extra_read),
            "scratch": scratch,
            "scratch_mb": self.scratch_mb if self.namespaces and scratch else 0,
            "namespaces": self.namespaces,
            # landlock: socket() is refused by seccomp and TCP by Landlock, so an empty network namespace
            # would add ~1 ms per program (more under load: namespaces are torn down serially) for nothing
            "network_ns": self.namespaces and self.layer == "namespaces",
        }

    def covers(self) -> list[str]:
        """What this layer enforces in the kernel, for logs, run.json and /healthz."""
        if self.layer == "none":
            return []
        out = []
        if self.layer == "landlock":
            out += ["fs-read", "fs-write"]
            if self.landlock_abi >= 4:
                out.append("tcp")
            if self.landlock_abi >= 6:
                out.append("signals")
        else:
            out.append("fs-write")
        if self.namespaces:
            out += ["scratch-size"] + (["netns"] if self.layer == "namespaces" else [])
        out += ["no-processes", "no-sockets", "no-capabilities"]
        return out

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "covers": self.covers()}


@functools.lru_cache(maxsize=1)
def read_paths() -> tuple[str, ...]:
    """Paths a confined Python process may read: the installation (prefixes, stdlib, site-packages, the
    interpreter binary's real location) and the system libraries."""
    found: list[str] = []
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(os.path.realpath(sys.executable))]  # fmt: skip
    candidates += [p for k, p in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib")]
    candidates += [p for p in sys.path if p and os.path.isabs(p) and "site-packages" in p]
    for path in list(candidates) + list(SYSTEM_READ_PATHS):
        real = path if path.startswith("/proc/") else os.path.realpath(path)  # /proc/self: the child's own
        for p in dict.fromkeys((path, real)):
            if os.path.exists(p) and p not in found and p != "/":
                found.append(p)
    return tuple(found)


def _landlock_abi() -> int:
    try:
        sys.path.insert(0, CHILD_DIR)
        import _confine  # noqa: PLC0415 - a top-level module of this folder (the harness imports it so)
    except (OSError, ImportError, AttributeError):
        return 0
    finally:
        sys.path.remove(CHILD_DIR)
    try:
        return _confine.landlock_abi()
    except OSError:
        return 0


_PROBE = """
import sys, os
sys.path.insert(0, {dir!r})
import _confine
_confine.confine({layer!r}, {read!r}, {scratch!r}, 1 if {ns!r} else 0, namespaces={ns!r}, network_ns={ns!r})
os.chdir({scratch!r}) if not {ns!r} else None
import socket
try:
    socket.socket()
    sys.exit(3)
except PermissionError:
    pass
open("probe.txt", "w").write("ok")
"""


def _probe_child(layer: str, namespaces: bool) -> tuple[bool, str]:
    """Apply ``layer`` in a short-lived child (never in this process) and report whether it worked."""
    with tempfile.TemporaryDirectory(prefix="metaagent-probe-") as scratch:
        code = _PROBE.format(dir=CHILD_DIR, layer=layer, read=list(read_paths()), ns=namespaces, scratch=scratch)
        try:
            proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True,
                                  timeout=30, env={"PATH": "/usr/bin:/bin"}, cwd=scratch,
                                  stdin=subprocess.DEVNULL)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as e:
            return False, str(e)
    tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    return proc.returncode == 0, tail


@functools.lru_cache(maxsize=1)
def probe() -> dict[str, Any]:
    """What works on this machine (cached): Landlock ABI, namespaces, and whether each layer applies."""
    abi = _landlock_abi()
    ns_ok, ns_why = _probe_child("namespaces", True)
    out: dict[str, Any] = {"landlock_abi": abi, "namespaces": ns_ok, "namespaces_error": "" if ns_ok else ns_why}
    if abi >= MIN_LANDLOCK_ABI:
        ok, why = _probe_child("landlock", ns_ok)
        out["landlock"], out["landlock_error"] = ok, "" if ok else why
    else:
        out["landlock"] = False
        out["landlock_error"] = (
            f"Landlock ABI {abi} (needs >= {MIN_LANDLOCK_ABI}: Linux >= 6.2 with CONFIG_SECURITY_LANDLOCK and "
            "landlock in the lsm= boot list)"
        )
    return out


def resolve(mode: str = "auto", scratch_mb: int = 64) -> Isolation:
    """The :class:`Isolation` for ``mode``; :class:`IsolationError` when a named layer is unavailable."""
    if mode not in ISOLATION_MODES:
        raise IsolationError(f"execution.isolation must be one of {ISOLATION_MODES}, got {mode!r}")
    if mode == "none":
        return Isolation("none", mode, 0, False, scratch_mb, "execution.isolation=none")
    p = probe()
    if mode in ("auto", "landlock") and p["landlock"]:
        return Isolation("landlock", mode, p["landlock_abi"], p["namespaces"], scratch_mb)
    if mode == "landlock":
        raise IsolationError(f"execution.isolation=landlock is not available here: {p['landlock_error']}")
    if p["namespaces"]:
        return Isolation("namespaces", mode, p["landlock_abi"], True, scratch_mb,
                         f"no Landlock: {p['landlock_error']}")  # fmt: skip
    why = f"no Landlock ({p['landlock_error']}) and no namespaces ({p['namespaces_error']})"
    if mode == "namespaces":
        raise IsolationError(f"execution.isolation=namespaces is not available here: {p['namespaces_error']}")
    return Isolation("none", mode, p["landlock_abi"], False, scratch_mb, why)


_active: Isolation | None = None


def configure(mode: str | None = None, scratch_mb: int = 64, *, quiet: bool = False) -> Isolation:
    """Choose the layer for this process (and, through ``METAAGENT_ISOLATION``, the processes it starts);
    logs the choice. ``mode`` None: ``METAAGENT_ISOLATION`` or ``auto``."""
    global _active
    mode = mode or os.environ.get(ENV_VAR) or "auto"
    iso = resolve(mode, scratch_mb)
    _active = iso
    os.environ[ENV_VAR] = mode
    if not quiet:
        if iso.layer == "none":
            log.warning("model-written code runs WITHOUT kernel isolation (%s)", iso.reason)
        else:
            log.info("model-written code is isolated with %s (%s)", iso.layer, ", ".join(iso.covers()))
    return iso


def active() -> Isolation:
    """The layer in force (configured on first use from ``METAAGENT_ISOLATION``, default ``auto``)."""
    return _active if _active is not None else configure(quiet=True)


def for_config(config: ExecutionConfig | None, *, purpose: str, code_tasks: bool = True) -> Isolation:
    """Configure the layer for a command. ``purpose="train"`` with code tasks refuses to start when auto
    finds no layer; evaluation and serving warn loudly instead."""
    config = config or ExecutionConfig()
    iso = configure(config.isolation, config.scratch_mb, quiet=True)
    if iso.layer == "none" and config.isolation == "auto":
        if purpose == "train" and code_tasks:
            raise IsolationError(f"refusing to train on code tasks without isolation: {iso.reason}; {HOW_TO_ACCEPT}")
        log.warning("!!! model-written code will run WITHOUT kernel isolation (%s); %s", iso.reason, HOW_TO_ACCEPT)
    elif iso.layer == "none":
        log.warning("model-written code runs without kernel isolation (execution.isolation=none)")
    else:
        log.info("model-written code is isolated with %s (%s)", iso.layer, ", ".join(iso.covers()))
    return iso
