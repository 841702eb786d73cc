"""The isolation layer for model-written code: which kernel mechanism confines it, chosen once per process.

Every process that runs model-written code confines itself before running it (the child side,
:mod:`._confine`): the code-test harness (programs under test, also those of the workflow tools
``run_tests`` / ``run_program``) and the workflow sandbox workers. This module decides the layer and the
paths:

* ``landlock`` (strongest): Landlock (reads only the interpreter's standard library and the system
  libraries, never a site-packages / dist-packages directory (installed datasets, the project's own data
  in a wheel install) except the packages named in ``execution.packages``; writes only the process's own
  fresh temporary directory; no TCP bind/connect, no signals out of the domain), plus, where the kernel
  allows it, the mount namespace of ``namespaces`` (its own root; the temporary directory a size-limited
  tmpfs) and empty network and IPC namespaces;
* ``namespaces``: a mount namespace whose root is a new read-only file system holding only what Landlock
  would let a program read (bind mounts, :func:`._confine.build_root`) and the tmpfs temporary directory,
  and empty network and IPC namespaces: the package, run directories and home do not exist there;
* ``none``: only the rlimits, clean environment, process-group kill and Python-level guards.

Both real layers also drop every capability and install a seccomp filter (no new processes, no execve,
no sockets (socket(), io_uring, connect/bind), no memfd / System V / POSIX shared memory, signals (also
a file's SIGIO owner) and resource calls only on itself, no inotify / fanotify / dnotify, no
chmod/chown/xattr; the tables are in :mod:`._confine`). ``auto`` picks the strongest layer that works
here; :func:`configure` logs the choice, and :func:`describe` is what ``run.json`` and ``/healthz``
record. Memory beyond the address space (tmpfs, kernel buffers) and the number of tasks (threads) are
bounded per program by a memory and pids cgroup where one can be created (:mod:`.cgroup`; without a pids
controller, ``RLIMIT_NPROC`` in the program's user namespace when the trainer is not root).

Config: ``execution.isolation: auto | landlock | namespaces | none`` (:class:`ExecutionConfig`). The
choice is also exported as ``METAAGENT_ISOLATION`` so helper processes started later (data loaders, Ray
workers) make the same one.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import importlib.util
import json
import logging
import os
import site
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

from metaagent.config import ConfigError

from . import cgroup
from .errors import ExecutionError

log = logging.getLogger(__name__)

ISOLATION_MODES = ("auto", "landlock", "namespaces", "none")
MEMORY_CGROUP_MODES = ("auto", "none")  # not "off": YAML reads it as false
LAYERS_BY_STRENGTH = ("landlock", "namespaces", "none")
ENV_VAR = "METAAGENT_ISOLATION"
SETTINGS_ENV_VAR = "METAAGENT_EXECUTION"  # the other execution.* settings, as JSON
CHILD_DIR = str(Path(__file__).resolve().parent)  # where _confine.py lives (the harness imports it from here)
#: how a child Python started with ``-I -S`` (no PYTHONPATH, no site) imports ``_confine``: from :data:`CHILD_DIR`
CHILD_IMPORT = f"import sys; sys.path.insert(0, {CHILD_DIR!r}); import _confine"
#: the oldest Landlock ABI used as a layer: 3 is the first that refuses truncating a file
MIN_LANDLOCK_ABI = 3
#: library trees a Python program reads (shared libraries of the extension modules, a system Python's
#: standard library), always minus the site directories below
SYSTEM_LIB_DIRS = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/local/lib", "/lib", "/lib64", "/lib32")
#: other system paths a Python program reads (loader cache, time zones, certificates, its own /proc)
SYSTEM_READ_PATHS = (
    "/etc/ld.so.cache", "/etc/localtime", "/usr/share/zoneinfo",
    "/etc/ssl", "/etc/ca-certificates", "/etc/mime.types", "/proc/self",
)  # fmt: skip
#: directories of installed packages: never readable as a whole (datasets with reference solutions, the
#: project's bundled gold answers in a wheel install); only the packages in ``execution.packages``
SITE_DIR_NAMES = ("site-packages", "dist-packages")
#: the project's own package (its data: gold answers, hidden tests), never readable by model-written code
PACKAGE_DIR = str(Path(__file__).resolve().parents[1])
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
    when it is a tmpfs (mount namespaces available); writing more fails with ENOSPC. ``packages``: the
    installed packages (top-level import names) a test program may import when site packages are on
    (``reward.domains.code.site_packages``); nothing else in site-packages is readable. ``memory_cgroup``:
    ``auto`` puts every test program in its own memory cgroup (limit: its memory + its scratch size, tmpfs and
    kernel memory included) where cgroups are writable, ``none`` never does. ``max_tasks``: the tasks
    (threads, each a host PID) a test program may hold at once, enforced by the pids controller of its
    cgroup where there is one (:mod:`.cgroup`).
    """

    isolation: str = "auto"  # kernel isolation of model-written code: auto | landlock | namespaces | none
    scratch_mb: int = 64  # size of each test program's temporary directory (a tmpfs) in MB
    # importable installed packages under reward.domains.code.site_packages, e.g. [numpy]
    packages: tuple[str, ...] = ()
    memory_cgroup: str = "auto"  # per-program memory cgroup: auto (where writable) | none
    max_tasks: int = 128  # threads a test program may hold at once (pids cgroup)

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATION_MODES:
            raise ConfigError(f"execution.isolation must be one of {ISOLATION_MODES}, got {self.isolation!r}")
        if self.scratch_mb < 1:
            raise ConfigError(f"execution.scratch_mb must be >= 1, got {self.scratch_mb}")
        if isinstance(self.packages, str) or not all(
            isinstance(p, str) and p.isidentifier() for p in self.packages
        ):
            raise ConfigError(
                f"execution.packages must be a list of top-level import names (e.g. [numpy]), "
                f"got {self.packages!r}"
            )
        self.packages = tuple(self.packages)
        if not 8 <= self.max_tasks <= 4096:
            raise ConfigError(
                f"execution.max_tasks must be in [8, 4096] (threads per program), got {self.max_tasks}"
            )
        if self.memory_cgroup not in MEMORY_CGROUP_MODES:
            raise ConfigError(
                f"execution.memory_cgroup must be one of {MEMORY_CGROUP_MODES}, got {self.memory_cgroup!r}"
            )


@dataclass(frozen=True)
class Isolation:
    """The layer in force in this process and what the kernel offers."""

    layer: str  # landlock | namespaces | none
    requested: str  # what the config asked for
    landlock_abi: int
    namespaces: bool  # mount + network namespaces can be created here
    scratch_mb: int = 64
    reason: str = ""  # why a weaker layer than landlock (empty when landlock)
    packages: tuple[str, ...] = ()  # importable installed packages when a program runs with site packages
    memory_cgroup: str = "auto"  # per-program memory cgroups: auto (where writable) | none
    max_tasks: int = 128  # tasks (threads) per program, where the slots have a pids controller

    def child_spec(self, scratch: str | None, *, site_packages: bool = False) -> dict[str, Any] | None:
        """The keyword arguments of :func:`._confine.confine` for a child process (None: layer none);
        ``site_packages``: the process imports from site-packages (``self.packages`` become readable)."""
        if self.layer == "none":
            return None
        rules = read_rules(self.packages if site_packages else (), hide=self.namespaces)
        return {
            "layer": self.layer,
            "read_paths": list(rules.read),
            "list_paths": list(rules.listed),
            "hide_paths": list(rules.hidden),
            "keep_paths": list(rules.keep),
            "scratch": scratch,
            "scratch_mb": self.scratch_mb if self.namespaces and scratch else 0,
            "namespaces": self.namespaces,
            # under landlock too: UDP, Unix datagrams and anything a future kernel interface opens would
            # otherwise share the host's network; System V / POSIX IPC objects the host's
            "network_ns": self.namespaces,
            "landlock_abi": self.landlock_abi if self.layer == "landlock" else None,
            "link_paths": list(link_paths()),
            # no pids cgroup: RLIMIT_NPROC in the program's user namespace (made when not root)
            "max_tasks": None if self.tasks_by_cgroup() else self.max_tasks,
        }

    def tasks_by_cgroup(self) -> bool:
        """Whether each test program's tasks are bounded by the pids controller of its cgroup slot."""
        slots = None if self.memory_cgroup == "none" else cgroup.probe()[0]
        return slots is not None and slots.tasks is not None

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
                out.append("signal-scope")
        else:
            out += ["fs-read", "fs-write"]  # the program's own root (a mount namespace is this layer)
        if self.namespaces:
            out += ["own-root", "scratch-size", "netns", "ipcns"]
        if self.tasks_by_cgroup() or (self.namespaces and os.geteuid() != 0):
            out.append("tasks")
        out += ["no-processes", "no-sockets", "no-signals-out", "no-fs-watch", "no-shared-memory",
                "no-capabilities"]  # fmt: skip
        return out

    def describe(self) -> dict[str, Any]:
        """What ``run.json`` and ``/healthz`` record: the layer, what it covers, and the memory cgroups
        (``"v1: <dir>"`` / ``"v2: <dir>"``, or ``"none: <why>"``)."""
        tasks = "none: no memory cgroups (the pids limit is part of each program's slot)"
        if self.memory_cgroup == "none":
            cgroups = "none: execution.memory_cgroup=none"
        else:
            slots, why = cgroup.probe()
            cgroups = f"v{slots.root.version}: {slots.root.path}" if slots else f"none: {why}"
            if slots and slots.tasks:
                tasks = f"v{slots.tasks.version}: {slots.tasks.path} (max {self.max_tasks} tasks per program)"
            elif slots:
                tasks = f"none: {slots.tasks_why}"
        if not self.tasks_by_cgroup() and os.geteuid() == 0:
            tasks += "; tasks not bounded (root is exempt from RLIMIT_NPROC)"
        elif not self.tasks_by_cgroup() and self.namespaces:
            tasks += f"; RLIMIT_NPROC {self.max_tasks} in each program's user namespace"
        elif not self.tasks_by_cgroup():
            tasks += "; tasks not bounded (no user namespace to count them in)"
        return {**asdict(self), "covers": self.covers(), "memory_cgroups": cgroups, "pids_cgroups": tasks}


def _beneath(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _site_dirs() -> set[str]:
    """Every site-packages / dist-packages directory of this interpreter and of the library trees."""
    found = set(site.getsitepackages()) | {site.getusersitepackages()}
    found |= {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    found |= {p for p in sys.path if os.path.basename(p.rstrip(os.sep)) in SITE_DIR_NAMES}
    stdlib_parent = os.path.dirname(sysconfig.get_paths()["stdlib"])
    for root in (*SYSTEM_LIB_DIRS, stdlib_parent):
        for name in SITE_DIR_NAMES:
            found |= set(glob.glob(os.path.join(root, "python*", name)))
    return {os.path.realpath(p) for p in found if p}


def _grant(root: str, excluded: list[str], read: list[str], listed: list[str]) -> None:
    """Add read rules for ``root`` minus every path in ``excluded``: a root with no excluded path beneath
    is one rule; otherwise it may be listed and each entry is granted the same way."""
    inside = [e for e in excluded if _beneath(e, root)]
    if not inside:
        read.append(root)
        return
    if root in inside or not os.path.isdir(root):
        return
    listed.append(root)
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        real = os.path.realpath(path)
        if real != path and any(_beneath(e, real) or _beneath(real, e) for e in excluded):
            continue  # a link to (or above) an excluded directory
        _grant(real, inside if real == path else excluded, read, listed)


class ReadRules(NamedTuple):
    """What a confined process may read: Landlock rules, plus what its mount namespace hides."""

    read: tuple[str, ...]  # readable paths (Landlock read rules)
    listed: tuple[str, ...]  # directories whose entries may be listed, not read
    hidden: tuple[str, ...]  # directories beneath a readable path, covered by an empty read-only tmpfs
    keep: tuple[str, ...]  # paths beneath a hidden directory, bind-mounted back (execution.packages)


@functools.lru_cache(maxsize=8)
def read_rules(packages: tuple[str, ...] = (), hide: bool = False) -> ReadRules:
    """What a confined Python process may read: the interpreter's standard library and extension modules,
    the system library trees, a few system files, and the top-level ``packages`` (import names, e.g.
    ``("numpy",)``: their directories and bundled ``<name>.libs``); never a site directory as a whole, nor
    the ``metaagent`` package, nor anything else (home, run directories).

    Site directories inside a library tree (a Python's own site-packages below its standard library) are
    taken out of it in one of two ways. ``hide`` (the process has a mount namespace): an empty read-only
    tmpfs covers each, so the trees stay one rule each. Otherwise each tree is split: every entry on the
    way to a site directory is its own rule (the directories on the way may only be listed)."""
    paths = sysconfig.get_paths()
    dynload = sysconfig.get_config_var("DESTSHARED") or ""  # lib-dynload: the extension modules
    roots: list[str] = []
    for root in (os.path.dirname(paths["stdlib"]), paths["stdlib"], dynload, *SYSTEM_LIB_DIRS):
        real = os.path.realpath(root) if root else ""
        if not real or real == "/" or not os.path.exists(real) or any(_beneath(real, r) for r in roots):
            continue
        roots = [r for r in roots if not _beneath(r, real)] + [real]
    excluded = sorted(_site_dirs() | {os.path.realpath(PACKAGE_DIR)})
    files = [p if p.startswith("/proc/") else os.path.realpath(p) for p in SYSTEM_READ_PATHS if os.path.exists(p)]
    allowed = package_paths(packages) if packages else []
    if hide:
        hidden = [e for e in excluded if os.path.isdir(e) and any(_beneath(e, r) for r in roots)]
        keep = [p for p in allowed if any(_beneath(p, h) for h in hidden)]
        own = os.path.realpath(PACKAGE_DIR)
        listed = [d for d in excluded if d not in hidden and d != own and os.path.isdir(d)] if packages else []
        return ReadRules(tuple(roots + files + allowed), tuple(listed), tuple(hidden), tuple(keep))
    read: list[str] = []
    listed = []
    for root in roots:
        _grant(root, excluded, read, listed)
    if packages:  # the import system lists a site directory to find a package in it
        listed += [d for d in excluded if os.path.isdir(d) and d != os.path.realpath(PACKAGE_DIR)]
    return ReadRules(tuple(dict.fromkeys(read + files + allowed)), tuple(dict.fromkeys(listed)), (), ())


@functools.lru_cache(maxsize=1)
def link_paths() -> tuple[str, ...]:
    """The system paths as a program names them (``/lib``, ``/etc/localtime``, the standard library's
    directories), whose symbolic links a confined process's new root recreates (the read rules are
    resolved paths)."""
    paths = sysconfig.get_paths()
    named = (*SYSTEM_LIB_DIRS, *SYSTEM_READ_PATHS, paths["stdlib"],
             sysconfig.get_config_var("DESTSHARED") or "")  # fmt: skip
    return tuple(p for p in dict.fromkeys(named) if p and not p.startswith("/proc/") and os.path.lexists(p))


def package_paths(packages: tuple[str, ...]) -> list[str]:
    """The files of the top-level import names ``packages`` (their directory or module file, and a
    ``<name>.libs`` directory of bundled shared libraries next to it); IsolationError for an unknown name."""
    out = []
    for name in packages:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not (spec.origin or spec.submodule_search_locations):
            raise IsolationError(
                f"execution.packages names {name!r}, which is not importable here; install it or remove it"
            )
        locations = list(spec.submodule_search_locations or []) or [spec.origin]
        for loc in locations:
            real = os.path.realpath(loc)
            if _beneath(real, os.path.realpath(PACKAGE_DIR)):
                raise IsolationError(f"execution.packages may not name the project's own package ({name!r})")
            out.append(real)
            libs = os.path.join(os.path.dirname(real), f"{name}.libs")
            if os.path.isdir(libs):
                out.append(os.path.realpath(libs))
    return out


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
{child_import}
_confine.confine({layer!r}, {read!r}, {scratch!r}, 1 if {ns!r} else 0, namespaces={ns!r}, network_ns={ns!r},
                 list_paths={listed!r}, hide_paths={hidden!r}, link_paths={links!r})
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
        rules = read_rules(hide=namespaces)
        code = _PROBE.format(child_import=CHILD_IMPORT, layer=layer, read=list(rules.read), listed=list(rules.listed),
                             hidden=list(rules.hidden), ns=namespaces, scratch=scratch,
                             links=list(link_paths()))  # fmt: skip
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


def configure(
    mode: str | None = None,
    scratch_mb: int | None = None,
    *,
    packages: tuple[str, ...] | None = None,
    memory_cgroup: str | None = None,
    max_tasks: int | None = None,
    quiet: bool = False,
) -> Isolation:
    """Choose the layer for this process (and, through ``METAAGENT_ISOLATION`` / ``METAAGENT_EXECUTION``,
    the processes it starts); logs the choice. Arguments left None: those environment variables, else
    the :class:`ExecutionConfig` defaults."""
    global _active
    inherited = json.loads(os.environ.get(SETTINGS_ENV_VAR) or "{}")
    settings = ExecutionConfig(
        mode or os.environ.get(ENV_VAR) or "auto",
        inherited.get("scratch_mb", 64) if scratch_mb is None else scratch_mb,
        tuple(inherited.get("packages", ())) if packages is None else tuple(packages),
        inherited.get("memory_cgroup", "auto") if memory_cgroup is None else memory_cgroup,
        inherited.get("max_tasks", ExecutionConfig.max_tasks) if max_tasks is None else max_tasks,
    )
    package_paths(settings.packages)  # an unknown name fails here, not at the first test program
    iso = resolve(settings.isolation, settings.scratch_mb)
    iso = dataclasses.replace(iso, packages=settings.packages, memory_cgroup=settings.memory_cgroup,
                              max_tasks=settings.max_tasks)  # fmt: skip
    _active = iso
    os.environ[ENV_VAR] = settings.isolation
    inherited = {"scratch_mb": settings.scratch_mb, "packages": list(settings.packages),
                 "memory_cgroup": settings.memory_cgroup, "max_tasks": settings.max_tasks}  # fmt: skip
    os.environ[SETTINGS_ENV_VAR] = json.dumps(inherited)
    if not quiet:
        if iso.layer == "none":
            log.warning("model-written code runs WITHOUT kernel isolation (%s)", iso.reason)
        else:
            log.info("model-written code is isolated with %s (%s)", iso.layer, ", ".join(iso.covers()))
    return iso


def active() -> Isolation:
    """The layer in force (configured on first use from ``METAAGENT_ISOLATION``, default ``auto``)."""
    return _active if _active is not None else configure(quiet=True)


def cgroup_slots() -> Any:
    """The pool of per-program memory cgroups (:class:`.cgroup.Slots`), or None: ``execution.memory_cgroup``
    is ``none`` or cgroups are not writable here (:func:`describe` says why)."""
    if active().memory_cgroup == "none":
        return None
    return cgroup.probe()[0]


def for_config(config: ExecutionConfig | None, *, purpose: str, code_tasks: bool = True) -> Isolation:
    """Configure the layer for a command. ``purpose="train"`` with code tasks refuses to start when auto
    finds no layer; evaluation and serving warn loudly instead."""
    config = config or ExecutionConfig()
    iso = configure(config.isolation, config.scratch_mb, packages=config.packages,
                    memory_cgroup=config.memory_cgroup, max_tasks=config.max_tasks, quiet=True)  # fmt: skip
    if iso.layer == "none" and config.isolation == "auto":
        if purpose == "train" and code_tasks:
            raise IsolationError(f"refusing to train on code tasks without isolation: {iso.reason}; {HOW_TO_ACCEPT}")
        log.warning("!!! model-written code will run WITHOUT kernel isolation (%s); %s", iso.reason, HOW_TO_ACCEPT)
    elif iso.layer == "none":
        log.warning("model-written code runs without kernel isolation (execution.isolation=none)")
    else:
        log.info("model-written code is isolated with %s (%s)", iso.layer, ", ".join(iso.covers()))
    return iso
