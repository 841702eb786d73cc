"""Per-program memory and pids cgroups: memory the address-space limit does not see, and the number of
tasks (threads) a program holds, are bounded too.

RLIMIT_AS bounds what a program maps; pages of a tmpfs (the scratch directory), pipe and socket buffers
and other kernel memory are not mapped, so only a memory cgroup bounds them. Where this process can
create memory cgroups, every test program runs in one (a *slot*) whose limit is the program's memory
plus its scratch size (``memory.max`` with ``memory.swap.max = 0`` on cgroup v2; ``memory.limit_in_bytes``
and, with swap accounting, ``memory.memsw.limit_in_bytes`` on the v1 memory hierarchy). The runner moves
each program's process into its slot while the interpreter starts; the harness runs nothing of the
program before (:mod:`.code_runner`). A program the kernel's OOM killer stops inside its slot is
reported as ``memory``. Where a pids controller is available too (the v1 pids hierarchy, or pids beside
memory on cgroup v2), each slot also caps the program's tasks (``pids.max``: threads count, each one
holds a host PID; a thread bomb otherwise exhausts ``pid_max`` for the whole machine, root being exempt
from ``RLIMIT_NPROC``). Slots are created once and reused (no mkdir / rmdir per program) and removed when
this process exits.

Where slots go: below this process's own memory cgroup. cgroup v1 has no further rule. cgroup v2 only
lets a cgroup with processes give its children a controller when it is the root; so when memory is
available but not enabled below our cgroup and we are the only process in it, this process first moves
into a leaf ``metaagent-host-<pid>`` and then enables memory (what nsjail does). Otherwise (a read-only
``/sys/fs/cgroup`` as in most containers, other processes in our cgroup, no memory controller) there are
no slots and :func:`probe` says why; then memory outside the address space is bounded by the tmpfs size
(``execution.scratch_mb``), ``RLIMIT_NOFILE`` (pipes, socket pairs) and the seccomp filter's refusal of
memfd, System V / POSIX shared memory and io_uring (:mod:`._confine`).
"""

from __future__ import annotations

import atexit
import errno
import functools
import os
import subprocess
import sys
import threading
from dataclasses import dataclass

from .errors import ExecutionError

#: per cgroup version: the limit file, the swap limit file (None: none), where OOM kills are counted and
#: the task limit of the pids controller
FILES = {
    2: {"limit": "memory.max", "swap": "memory.swap.max", "events": "memory.events", "tasks": "pids.max"},
    1: {"limit": "memory.limit_in_bytes", "swap": "memory.memsw.limit_in_bytes",
        "events": "memory.oom_control", "tasks": "pids.max"},
}  # fmt: skip


class CgroupError(ExecutionError):
    """A memory cgroup could not be prepared or joined (the message says which file and why)."""


@dataclass(frozen=True)
class CgroupRoot:
    """Where this process creates its slots: ``path`` (a directory of a cgroup file system)."""

    version: int  # 1 or 2
    path: str


@dataclass(frozen=True)
class Slot:
    """One program's cgroups: ``path`` (memory) and ``tasks`` (pids: the same directory on cgroup v2, one
    of the v1 pids hierarchy, None without a pids controller)."""

    path: str
    tasks: str | None = None

    def __str__(self) -> str:
        return self.path if self.tasks in (None, self.path) else f"{self.path} + {self.tasks}"


def own_cgroup(proc_cgroup: str, mountinfo: str, controller: str = "memory") -> tuple[int, str] | None:
    """(version, directory) of this process's ``controller`` cgroup from the texts of ``/proc/self/cgroup``
    and ``/proc/self/mountinfo``; a v1 hierarchy of that controller wins over v2 (then v2 lacks it)."""
    mounts: dict[int, str] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line:
            continue
        after = line.split(" - ", 1)[1].split()
        fstype, options = after[0], after[2] if len(after) > 2 else ""
        if fstype == "cgroup" and controller in options.split(","):
            mounts.setdefault(1, fields[4])
        elif fstype == "cgroup2":
            mounts.setdefault(2, fields[4])
    v1 = v2 = None
    for line in proc_cgroup.splitlines():
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif controller in controllers.split(","):
            v1 = path
    if v1 is not None and 1 in mounts:
        return 1, os.path.join(mounts[1], v1.lstrip("/"))
    if v2 is not None and 2 in mounts:
        return 2, os.path.join(mounts[2], v2.lstrip("/"))
    return None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def prepare_root(version: int, cgroup: str, pid: int, controller: str = "memory") -> CgroupRoot:
    """The directory below which slots can get a ``controller`` limit; CgroupError says why there is none."""
    if version == 1:
        return CgroupRoot(1, cgroup)
    if controller not in _read(os.path.join(cgroup, "cgroup.controllers")).split():
        raise CgroupError(f"cgroup v2: no {controller} controller in {cgroup} (cgroup.controllers)")
    if controller in _read(os.path.join(cgroup, "cgroup.subtree_control")).split():
        return CgroupRoot(2, cgroup)
    procs = _read(os.path.join(cgroup, "cgroup.procs")).split()
    if procs and procs != [str(pid)]:
        raise CgroupError(
            f"cgroup v2: {cgroup} holds other processes, so {controller} cannot be enabled below it; start "
            "the trainer alone in a cgroup (e.g. `systemd-run --scope -p Delegate=yes ...`)"
        )
    if procs:  # the no-internal-process rule: move into a leaf first
        leaf = os.path.join(cgroup, f"metaagent-host-{pid}")
        os.makedirs(leaf, exist_ok=True)
        _write(os.path.join(leaf, "cgroup.procs"), "0")
    _write(os.path.join(cgroup, "cgroup.subtree_control"), f"+{controller}")
    return CgroupRoot(2, cgroup)


def enter(slot: Slot, pid: int) -> None:
    """Move the process ``pid`` into ``slot`` (its memory cgroup, and its pids cgroup on cgroup v1)."""
    _write(os.path.join(slot.path, "cgroup.procs"), str(pid))
    if slot.tasks not in (None, slot.path):
        _write(os.path.join(slot.tasks, "cgroup.procs"), str(pid))


def oom_kills(slot: str, version: int) -> int:
    """How many processes the OOM killer has stopped in ``slot`` so far."""
    for line in _read(os.path.join(slot, FILES[version]["events"])).splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


class Slots:
    """A pool of reusable memory cgroups below ``root`` (with a pids limit below ``tasks`` where there is a
    pids controller: ``root`` itself on cgroup v2, the v1 pids hierarchy's directory); thread-safe.
    ``tasks_why``: why there is no pids limit (empty when there is one)."""

    def __init__(self, root: CgroupRoot, tasks: CgroupRoot | None = None, tasks_why: str = "") -> None:
        self.root, self.tasks, self.tasks_why = root, tasks, tasks_why
        self.files = FILES[root.version]
        self._free: list[Slot] = []
        self._made: list[Slot] = []
        self._lock = threading.Lock()
        atexit.register(self.remove_all)

    def acquire(self, limit_bytes: int, max_tasks: int | None = None) -> tuple[Slot, int]:
        """A slot limited to ``limit_bytes`` (swap: none) and, with a pids controller, ``max_tasks`` tasks
        (None: no task limit); and its OOM-kill count so far."""
        with self._lock:
            slot = self._free.pop() if self._free else None
            if slot is None:
                name = f"metaagent-{os.getpid()}-{len(self._made)}"
                tasks = None if self.tasks is None else os.path.join(self.tasks.path, name)
                slot = Slot(os.path.join(self.root.path, name), tasks)
                self._made.append(slot)
        try:
            os.makedirs(slot.path, exist_ok=True)
            self._set_limit(slot.path, limit_bytes)
            if slot.tasks is not None:
                os.makedirs(slot.tasks, exist_ok=True)
                tasks = "max" if max_tasks is None else str(max_tasks)
                _write(os.path.join(slot.tasks, self.files["tasks"]), tasks)
            return slot, oom_kills(slot.path, self.root.version)
        except OSError as e:
            raise CgroupError(f"cannot prepare the cgroups {slot}: {e}") from e

    def _set_limit(self, slot: str, limit: int) -> None:
        limit_file = os.path.join(slot, self.files["limit"])
        swap_file = os.path.join(slot, self.files["swap"])
        if self.root.version == 2:
            _write(limit_file, str(limit))
            if os.path.exists(swap_file):
                _write(swap_file, "0")
            return
        # v1: memory+swap must stay >= memory, so the order of the two writes depends on the direction
        has_swap = os.path.exists(swap_file)
        current = int(_read(limit_file))
        order = [limit_file, swap_file] if limit <= current else [swap_file, limit_file]
        for path in order:
            if path != swap_file or has_swap:
                _write(path, str(limit))

    def release(self, slot: Slot, kills_before: int) -> bool:
        """Return ``slot`` to the pool; True when the OOM killer stopped a process in it meanwhile."""
        try:
            killed = oom_kills(slot.path, self.root.version) > kills_before
        except OSError:
            killed = False
        with self._lock:
            self._free.append(slot)
        return killed

    def remove_all(self) -> None:
        with self._lock:
            made, self._made, self._free = self._made, [], []
        for slot in made:
            for path in dict.fromkeys((slot.path, slot.tasks)):
                try:
                    if path is not None:
                        os.rmdir(path)
                except OSError:
                    pass  # still in use or gone; an empty cgroup left behind holds no memory


@functools.lru_cache(maxsize=1)
def probe() -> tuple[Slots | None, str]:
    """(the slot pool, "") where per-program memory cgroups work here, else (None, why not)."""
    try:
        found = own_cgroup(_read("/proc/self/cgroup"), _read("/proc/self/mountinfo"))
    except OSError as e:
        return None, f"cannot read this process's cgroup: {e}"
    if found is None:
        return None, "no memory cgroup hierarchy is mounted"
    try:
        root = prepare_root(*found, os.getpid())
        tasks, tasks_why = _tasks_root(root)
        slots = Slots(root, tasks, tasks_why)
        slot, _ = slots.acquire(256 << 20, 64)
        # a child can be moved in (cgroup v2 delegation also needs write access to the common ancestor)
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", "input()"], stdin=subprocess.PIPE)
        try:
            enter(slot, proc.pid)
        finally:
            proc.communicate(b"\n", timeout=30)
            slots.release(slot, 0)
    except (OSError, CgroupError, subprocess.TimeoutExpired) as e:
        denied = isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
        reason = e.strerror if denied else e
        return None, f"cannot create memory cgroups below {found[1]}: {reason}"
    return slots, ""


def _tasks_root(memory: CgroupRoot) -> tuple[CgroupRoot | None, str]:
    """Where the slots' pids limits go (cgroup v2: beside memory; v1: the pids hierarchy), or (None, why)."""
    try:
        found = own_cgroup(_read("/proc/self/cgroup"), _read("/proc/self/mountinfo"), "pids")
        if found is None:
            return None, "no pids cgroup hierarchy is mounted"
        if found[0] != memory.version or (found[0] == 2 and found[1] != memory.path):
            return None, f"the pids controller ({found[1]}) is not where the memory slots are ({memory.path})"
        root = prepare_root(*found, os.getpid(), "pids")
        trial = os.path.join(root.path, f"metaagent-{os.getpid()}-probe")
        os.makedirs(trial, exist_ok=True)
        try:
            _write(os.path.join(trial, FILES[root.version]["tasks"]), "64")
        finally:
            os.rmdir(trial)
        return root, ""
    except (OSError, CgroupError) as e:
        return None, f"no pids controller for the slots: {e}"
