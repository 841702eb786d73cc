"""Child side of the isolation layer: confine the calling process with kernel mechanisms (ctypes only).

Imported by processes that are about to run model-written code: the code-test harness
(:mod:`._code_harness`, started with ``python -I -S``, so this module imports nothing outside the built-in
modules and ``ctypes``) and the workflow sandbox worker. The host side (which layer to use, which paths)
is :mod:`metaagent.execution.isolation`.

:func:`confine` applies, in this order (each step needs the previous one's privileges):

1. ``namespaces`` (both layers where the host offers them): a private mount namespace (plus a user
   namespace when not root) whose root is a new, read-only file system holding only the read paths
   (bind-mounted read-only: standard library, system libraries, a few system files, /proc/self, four
   devices), the ``hide_paths`` (site-packages inside those trees) covered by empty read-only tmpfs
   mounts, and the scratch directory as a size-limited tmpfs; the host's home, run directories, the
   project and everything else do not exist there. And (``network_ns``) fresh network and IPC
   namespaces (only a down loopback, no System V / POSIX message queue objects shared with the host);
2. ``no_new_privs``;
3. Landlock (``landlock`` layer): reads only beneath the listed read-only paths (a path given as
   ``(path, "dir")`` may only be listed, its files not read), every file-system right only beneath the
   scratch directory, no TCP bind/connect (ABI >= 4), no signals to processes outside the domain and no
   connection to abstract Unix sockets created outside it (ABI >= 6);
4. all capabilities dropped (root keeps uid 0 but loses CAP_DAC_OVERRIDE, CAP_SYS_ADMIN, CAP_KILL, ...);
5. a seccomp filter built from three tables below: :data:`DENIED` (refused with EPERM: new processes,
   namespaces and mounts, sockets and io_uring, shared memory and IPC, kernel interfaces, inotify and
   fanotify, file metadata),
   :data:`ARG_RULES` (allowed only with given arguments: threads but no processes, signals and resource
   calls only on the process itself, also the receiver of a file's SIGIO (``fcntl(F_SETOWN)``; the
   ``F_SETOWN_EX`` / ``FIOSETOWN`` / ``SIOCSPGRP`` forms refused), no leases or directory notifications,
   ``socketpair`` only as a connected AF_UNIX stream pair) and
   :data:`LAST_AUDITED` (any younger system call fails with ENOSYS, as on an older kernel; ``clone3`` too,
   so that libc falls back to ``clone``).

Every refusal is an ``OSError`` with ``EPERM`` (Landlock file access: ``EACCES``) in the program.
"""

import ctypes
import os
import sys

# ---- system call numbers ----------------------------------------------------------------------------
#: (x86_64, aarch64) number of every system call the filter names; None: not on that architecture.
#: Read from the kernel's uapi headers (x86_64: asm/unistd_64.h, aarch64: asm-generic/unistd.h);
#: tests/execution/test_seccomp.py checks them against the headers where those are installed.
SYSCALLS = {
    "landlock_create_ruleset": (444, 444), "landlock_add_rule": (445, 445), "landlock_restrict_self": (446, 446),
    # processes and other processes' memory
    "fork": (57, None), "vfork": (58, None), "clone": (56, 220), "clone3": (435, 435), "execve": (59, 221),
    "execveat": (322, 281), "ptrace": (101, 117), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271), "kcmp": (312, 272), "pidfd_open": (434, 434), "pidfd_getfd": (438, 438),
    "pidfd_send_signal": (424, 424), "process_madvise": (440, 440), "process_mrelease": (448, 448),
    # signals
    "kill": (62, 129), "tkill": (200, 130), "tgkill": (234, 131), "rt_sigqueueinfo": (129, 138),
    "rt_tgsigqueueinfo": (297, 240),
    # namespaces and mounts
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "chroot": (161, 51), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442),
    # sockets and asynchronous I/O (io_uring makes and connects sockets without socket()/connect())
    "socket": (41, 198), "socketpair": (53, 199), "connect": (42, 203), "bind": (49, 200),
    "listen": (50, 201), "accept": (43, 202), "accept4": (288, 242), "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426), "io_uring_register": (427, 427), "io_setup": (206, 0),
    # memory outside the address space: memfd, System V and POSIX IPC, userfaultfd
    "memfd_create": (319, 279), "memfd_secret": (447, 447), "shmget": (29, 194), "shmat": (30, 196),
    "shmctl": (31, 195), "shmdt": (67, 197), "semget": (64, 190), "semop": (65, 193), "semctl": (66, 191),
    "semtimedop": (220, 192), "msgget": (68, 186), "msgsnd": (69, 189), "msgrcv": (70, 188),
    "msgctl": (71, 187), "mq_open": (240, 180), "mq_unlink": (241, 181), "mq_timedsend": (242, 182),
    "mq_timedreceive": (243, 183), "mq_notify": (244, 184), "mq_getsetattr": (245, 185),
    "userfaultfd": (323, 282),
    # kernel interfaces (most need a capability that is dropped anyway)
    "bpf": (321, 280), "perf_event_open": (298, 241), "keyctl": (250, 219), "add_key": (248, 217),
    "request_key": (249, 218), "fanotify_init": (300, 262), "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265), "uselib": (134, None), "modify_ldt": (154, None), "syslog": (103, 116),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "swapon": (167, 224), "swapoff": (168, 225),
    "reboot": (169, 142), "acct": (163, 89), "quotactl": (179, 60), "quotactl_fd": (443, 443),
    "sethostname": (170, 161), "setdomainname": (171, 162), "settimeofday": (164, 170),
    "clock_settime": (227, 112), "clock_adjtime": (305, 266), "adjtimex": (159, 171), "iopl": (172, None),
    "ioperm": (173, None), "vhangup": (153, 58), "lookup_dcookie": (212, 18),
    # file metadata (Landlock does not cover it)
    "chmod": (90, None), "fchmod": (91, 52), "fchmodat": (268, 53), "chown": (92, None), "fchown": (93, 55),
    "lchown": (94, None), "fchownat": (260, 54), "setxattr": (188, 5), "lsetxattr": (189, 6),
    "fsetxattr": (190, 7), "removexattr": (197, 14), "lremovexattr": (198, 15), "fremovexattr": (199, 16),
    # calls that name a process: allowed on the calling process only (ARG_RULES)
    "prlimit64": (302, 261), "sched_setaffinity": (203, 122), "sched_setparam": (142, 118),
    "sched_setscheduler": (144, 119), "sched_setattr": (314, 274), "migrate_pages": (256, 238),
    "move_pages": (279, 239), "get_robust_list": (274, 100), "setpriority": (141, 140),
    "ioprio_set": (251, 30),
    # calls whose command argument sets a signal's receiver or a watch (ARG_RULES, by command)
    "fcntl": (72, 25), "ioctl": (16, 29),
    # watching the file system (names of files the host creates or opens, a channel between programs)
    "inotify_init": (253, None), "inotify_init1": (294, 26), "inotify_add_watch": (254, 27),
    "inotify_rm_watch": (255, 28), "fanotify_mark": (301, 263),
}  # fmt: skip
#: the highest system call number the tables above were audited against (kernel headers of Linux 6.x:
#: 450 = set_mempolicy_home_node on both architectures); younger ones fail with ENOSYS
LAST_AUDITED = 450

_MACHINE = os.uname().machine  # not `platform`: its import costs ~2 ms per test program
if _MACHINE in ("x86_64", "AMD64"):
    AUDIT_ARCH, _COLUMN = 0xC000003E, 0
elif _MACHINE in ("aarch64", "arm64"):
    AUDIT_ARCH, _COLUMN = 0xC00000B7, 1
else:  # pragma: no cover - other architectures: no layer is available
    AUDIT_ARCH, _COLUMN = None, None
NR = {} if _COLUMN is None else {n: nums[_COLUMN] for n, nums in SYSCALLS.items() if nums[_COLUMN] is not None}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class ConfineError(OSError):
    """A confinement step failed; the process must not go on to run untrusted code."""


def _check(result, what):
    if result < 0:
        err = ctypes.get_errno()
        raise ConfineError(err, f"{what}: {os.strerror(err)}")
    return result


def _syscall(name, *args):
    return _libc.syscall(ctypes.c_long(NR[name]), *args)


# ---- Landlock ---------------------------------------------------------------------------------------
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
#: handled file-system rights per ABI (1: 13 rights; 2: + REFER; 3: + TRUNCATE; 5: + IOCTL_DEV)
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]  # fmt: skip


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi():
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable (not built, disabled, no ctypes)."""
    if "landlock_create_ruleset" not in NR:
        return 0
    abi = _syscall("landlock_create_ruleset", None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(0, int(abi))


def _fs_handled(abi):
    return _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= abi)]


def apply_landlock(read_paths, write_paths, abi=None, list_paths=()):
    """Restrict this process (and anything it could start) with one Landlock domain. A path may also be
    an open file descriptor (an int: e.g. 0 so that ``open("/dev/stdin")`` reaches the test input file).
    ``list_paths``: directories whose entries may be listed (beneath them too) but whose files may not be
    read unless a read path grants them. Returns what was enforced: {"abi", "fs", "net", "scope"}."""
    abi = landlock_abi() if abi is None else abi
    if abi < 1:
        raise ConfineError(95, "Landlock is not available in this kernel")
    handled = _fs_handled(abi)
    attr = _RulesetAttr(handled, (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0,
                        (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)  # fmt: skip
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    fd = _check(_syscall("landlock_create_ruleset", ctypes.byref(attr), ctypes.c_size_t(size),
                         ctypes.c_uint32(0)), "landlock_create_ruleset")  # fmt: skip
    try:
        read = FS_READ_FILE | FS_READ_DIR
        write = handled & ~FS_EXECUTE & ~FS_IOCTL_DEV
        for paths, access in ((list_paths, FS_READ_DIR), (read_paths, read), (write_paths, write)):
            for path in paths:
                try:
                    pfd = path if isinstance(path, int) else os.open(path, os.O_PATH | os.O_CLOEXEC)
                    kind = os.fstat(pfd).st_mode & 0o170000
                    is_dir = kind == 0o040000
                    if isinstance(path, int) and kind != 0o100000:
                        continue  # a pipe, socket or tty: not a Landlock object (and not restricted by it)
                except OSError:
                    continue  # a listed path that does not exist (or a closed descriptor) grants nothing
                try:
                    allowed = (access if is_dir else access & _FILE_RIGHTS) & handled
                    if not allowed:
                        continue  # a listing right on a file: nothing to grant
                    rule = _PathBeneathAttr(allowed, pfd)
                    _check(_syscall("landlock_add_rule", ctypes.c_int(fd), ctypes.c_int(1), ctypes.byref(rule),
                                    ctypes.c_uint32(0)), f"landlock_add_rule({path})")  # fmt: skip
                finally:
                    if not isinstance(path, int):
                        os.close(pfd)
        _check(_libc.prctl(38, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(_syscall("landlock_restrict_self", ctypes.c_int(fd), ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(fd)
    return {"abi": abi, "fs": True, "net": abi >= 4, "scope": abi >= 6}


# ---- namespaces -------------------------------------------------------------------------------------
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWIPC = 0x00020000, 0x10000000, 0x40000000, 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18
)


def _write(path, text):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _mount(source, target, fstype, flags, data):
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount({target})")  # fmt: skip


def hide(hidden, keep=()):
    """Cover each directory of ``hidden`` with an empty read-only tmpfs (installed packages, datasets, the
    project's data); each path of ``keep`` beneath one is bind-mounted back into it, read-only (allowed
    packages)."""
    fds = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in keep}  # before they are covered
    try:
        for target in hidden:
            if not os.access(target, os.X_OK):
                continue  # out of this uid's reach (a worker as nobody below /root): unreadable anyway
            inside = [p for p in keep if p.startswith(target.rstrip("/") + "/")]
            flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
            _mount("tmpfs", target, "tmpfs", flags | (0 if inside else MS_RDONLY), "size=64k,mode=0755")
            if not inside:
                continue
            for path in inside:
                placeholder = os.path.join(target, path[len(target) :].lstrip("/"))
                os.makedirs(os.path.dirname(placeholder), exist_ok=True)
                if os.fstat(fds[path]).st_mode & 0o170000 == 0o040000:
                    os.mkdir(placeholder)
                else:
                    os.close(os.open(placeholder, os.O_WRONLY | os.O_CREAT, 0o644))
                _mount(f"/proc/self/fd/{fds[path]}", placeholder, None, MS_BIND | MS_REC, None)
                _mount(None, placeholder, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
            _mount(None, target, None, MS_REMOUNT | MS_RDONLY | flags, None)
    finally:
        for fd in fds.values():
            os.close(fd)


#: statvfs flags of a mount and the mount flags that keep them (a bind remount must keep the flags a user
#: namespace locked; ST_RELATIME is 4096, MS_RELATIME 1 << 21)
_LOCKED = ((2, MS_NOSUID), (4, MS_NODEV), (8, MS_NOEXEC), (1024, 1024), (2048, 2048), (4096, 1 << 21))
MNT_DETACH = 2
#: device nodes and links of the new root (Python programs write /dev/null, read /dev/urandom, /dev/stdin)
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
_DEV_LINKS = (("/dev/stdin", "/proc/self/fd/0"), ("/dev/stdout", "/proc/self/fd/1"),
              ("/dev/stderr", "/proc/self/fd/2"), ("/dev/fd", "/proc/self/fd"))  # fmt: skip


def _beneath(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def _open_source(path):
    """(descriptor, is a directory, mount flags to keep) of a path to bind, or None when it is out of reach
    (absent, or not searchable by this uid). Opened before the new root covers anything."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return None
    flags, kept = os.statvfs(f"/proc/self/fd/{fd}").f_flag, 0
    for st_flag, ms_flag in _LOCKED:
        kept |= ms_flag if flags & st_flag else 0
    return fd, os.fstat(fd).st_mode & 0o170000 == 0o040000, kept


def _bind_readonly(source, target):
    """Bind-mount the opened ``source`` (:func:`_open_source`) at ``target`` (created), read-only, nosuid."""
    fd, is_dir, kept = source
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
    _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC, None)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | kept, None)


def _links_on_the_way(path, depth=0):
    """The symbolic links (path, target) on the way to ``path`` (``/lib -> usr/lib``, a checkout's ``.venv``
    linking to another checkout's), following each link's target, so that paths a process computed before
    (``sys.path``) still lead where they did in a new root."""
    current, parts = "", [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        current += "/" + part
        try:
            target = os.readlink(current)
        except OSError:
            continue  # not a link (or absent)
        links = [(current, target)]
        if depth < 8:
            resolved = target if target.startswith("/") else os.path.dirname(current) + "/" + target
            links += _links_on_the_way(os.path.normpath("/".join([resolved, *parts[i + 1 :]])), depth + 1)
        return links
    return []


def build_root(base, read_paths, link_paths=(), scratch=None, scratch_mb=0, hidden=(), keep=()):
    """Make a new root file system of only ``read_paths`` (bind-mounted read-only at their own paths, the
    symbolic links on the way to ``link_paths`` recreated), a few devices, ``hidden`` covered (see
    :func:`hide`) and, at ``scratch``, a writable tmpfs of ``scratch_mb`` MB; then pivot into it. Everything
    else of the host's file system (home, run directories, the project, other checkouts, other
    processes' /proc) no longer exists for this process (ENOENT), nor do the host's paths' sizes and times
    (``stat``). ``base``: an existing directory the new root's tmpfs is mounted on (this mount namespace
    only)."""
    uid, gid = os.geteuid(), os.getegid()
    sources, bound = {}, []
    for path in sorted(set(read_paths) | set(_DEVICES)):
        if not any(_beneath(path, b) for b in bound):
            sources[path] = _open_source(path)
            bound += [path] if sources[path] else []
    links = [link for path in link_paths for link in _links_on_the_way(path)]
    try:
        _mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        for path, source in sources.items():
            if source is not None:
                _bind_readonly(source, base + path)
    finally:
        for source in sources.values():
            if source is not None:
                os.close(source[0])
    for link, target in (*_DEV_LINKS, *links):
        if not os.path.lexists(base + link):
            os.makedirs(os.path.dirname(base + link), exist_ok=True)
            os.symlink(target, base + link)
    hide([base + h for h in hidden], [base + k for k in keep])
    if scratch:
        os.makedirs(base + scratch, exist_ok=True)
        _mount("tmpfs", base + scratch, "tmpfs", MS_NOSUID | MS_NODEV,
               f"size={max(1, int(scratch_mb))}m,mode=0700,uid={uid},gid={gid}")  # fmt: skip
    os.chdir(base)
    _check(_syscall("pivot_root", b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", ctypes.c_int(MNT_DETACH)), "umount2(old root)")
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    os.chdir(scratch or "/")


class _Rlimit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_uint64), ("max", ctypes.c_uint64)]


RLIMIT_NPROC = 6


def limit_tasks(max_tasks):
    """``RLIMIT_NPROC`` = ``max_tasks``: in a fresh user namespace the kernel counts this uid's tasks in that
    namespace only (from 1), so this bounds the program's threads; the init user namespace's root is
    exempt (a pids cgroup bounds root, :mod:`metaagent.execution.cgroup`)."""
    limit = _Rlimit(max_tasks, max_tasks)
    _check(_libc.setrlimit(RLIMIT_NPROC, ctypes.byref(limit)), "setrlimit(RLIMIT_NPROC)")


def enter_namespaces(scratch=None, scratch_mb=0, network=True, read_paths=(), link_paths=(), hidden=(),
                     keep=()):  # fmt: skip
    """Private mount namespace whose root holds only ``read_paths`` and a tmpfs of ``scratch_mb`` MB on
    ``scratch`` (:func:`build_root`) and, with ``network``, empty network and IPC namespaces. Returns what
    was done ("userns": whether a user namespace was made, i.e. not root)."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | (CLONE_NEWNET | CLONE_NEWIPC if network else 0) | (CLONE_NEWUSER if uid != 0 else 0)
    _check(_syscall("unshare", ctypes.c_int(flags)), "unshare")
    if uid != 0:  # keep our own uid inside the user namespace
        _libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: after a uid switch /proc/self is root's until then
        try:
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        finally:
            _libc.prctl(4, 0, 0, 0, 0)
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    build_root(scratch or "/tmp", read_paths, link_paths, scratch, scratch_mb, hidden, keep)
    return {"mount": True, "net": bool(network), "scratch_mb": scratch_mb if scratch else 0,
            "userns": uid != 0}  # fmt: skip


# ---- capabilities -----------------------------------------------------------------------------------
class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities():
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


# ---- seccomp ----------------------------------------------------------------------------------------
_LD_W_ABS, _AND_K, _JEQ, _JSET, _JGE, _RET = 0x20, 0x54, 0x15, 0x45, 0x35, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000
_EPERM, _ENOSYS = 1, 38
CLONE_THREAD, AF_UNIX, SOCK_STREAM, SOCK_TYPE_MASK = 0x00010000, 1, 1, 0xF
PRIO_PROCESS, IOPRIO_WHO_PROCESS = 0, 1
#: fcntl commands (asm-generic/fcntl.h, linux/fcntl.h) and socket ioctls (asm-generic/sockios.h) that name
#: the receiver of a file's SIGIO / F_SETSIG signal, take a lease or set a directory watch
F_SETOWN, F_SETOWN_EX, F_SETLEASE, F_NOTIFY, FIOSETOWN, SIOCSPGRP = 8, 15, 1024, 1026, 0x8901, 0x8902


class ByCommand:
    """An ARG_RULES entry for a call whose argument ``index`` is a command: per command, None (refused) or
    the conditions under which it is allowed (as in ARG_RULES); every other command is allowed."""

    def __init__(self, index, commands):
        self.index, self.commands = index, dict(commands)


#: refused with EPERM, by what they would reach (the audit of the system call table, see SYSCALLS)
DENIED = {
    "processes": ("fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev",
                  "kcmp", "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "process_madvise",
                  "process_mrelease", "tkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"),
    "namespaces and mounts": ("unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree",
                              "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"),
    "sockets": ("socket", "connect", "bind", "listen", "accept", "accept4", "io_uring_setup",
                "io_uring_enter", "io_uring_register", "io_setup"),
    "shared memory and IPC": ("memfd_create", "memfd_secret", "shmget", "shmat", "shmctl", "shmdt", "semget",
                              "semop", "semctl", "semtimedop", "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open",
                              "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
                              "userfaultfd"),
    "kernel interfaces": ("bpf", "perf_event_open", "keyctl", "add_key", "request_key",
                          "name_to_handle_at", "open_by_handle_at", "uselib", "modify_ldt", "syslog",
                          "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
                          "swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd", "sethostname",
                          "setdomainname", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "iopl",
                          "ioperm", "vhangup", "lookup_dcookie"),
    "watching files": ("inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
                       "fanotify_init", "fanotify_mark"),
    "file metadata": ("chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat", "setxattr",
                      "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr"),
}  # fmt: skip

#: allowed only when every (argument index, mask, allowed values) holds: (argument & mask) is one of the
#: values (mask None: the whole 32-bit argument; "pid" / "-pid": the process's own pid / process group);
#: a ByCommand entry applies such conditions to some commands of the call only
ARG_RULES = {
    "clone": ((0, CLONE_THREAD, (CLONE_THREAD,)),),  # threads, never processes
    "socketpair": ((0, None, (AF_UNIX,)), (1, SOCK_TYPE_MASK, (SOCK_STREAM,))),  # no datagrams to a path
    "kill": ((0, None, (0, "pid", "-pid")),),
    "tgkill": ((0, None, ("pid",)),),
    "prlimit64": ((0, None, (0, "pid")),),
    "sched_setaffinity": ((0, None, (0, "pid")),),
    "sched_setparam": ((0, None, (0, "pid")),),
    "sched_setscheduler": ((0, None, (0, "pid")),),
    "sched_setattr": ((0, None, (0, "pid")),),
    "migrate_pages": ((0, None, (0, "pid")),),
    "move_pages": ((0, None, (0, "pid")),),
    "get_robust_list": ((0, None, (0, "pid")),),
    "setpriority": ((0, None, (PRIO_PROCESS,)), (1, None, (0, "pid"))),
    "ioprio_set": ((0, None, (IOPRIO_WHO_PROCESS,)), (1, None, (0, "pid"))),
    # the receiver of SIGIO / F_SETSIG (O_ASYNC, FIOASYNC): only the program itself (0: none); F_SETOWN_EX
    # passes it behind a pointer the filter cannot read, the socket ioctls likewise: refused. A lease
    # makes a host process's open() of the file wait (lease-break-time); F_NOTIFY watches a directory.
    "fcntl": ByCommand(1, {F_SETOWN: ((2, None, (0, "pid")),), F_SETOWN_EX: None, F_SETLEASE: None,
                           F_NOTIFY: None}),  # fmt: skip
    "ioctl": ByCommand(1, {FIOSETOWN: None, SIOCSPGRP: None}),
}


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _errno(e):
    return (_RET, 0, 0, 0x00050000 | e)


def _conditions(conditions, pid):
    """Instructions that return EPERM unless every condition holds, then allow. Arguments are read as
    their low 32 bits (little-endian ``seccomp_data``; the kernel reads ints and commands as 32 bits)."""
    body = []
    if conditions is None:  # a refused command
        return [_errno(_EPERM)]
    for index, mask, values in conditions:
        values = [{"pid": pid, "-pid": -pid}.get(v, v) & 0xFFFFFFFF for v in values]
        body.append((_LD_W_ABS, 0, 0, 16 + 8 * index))
        if mask is not None:
            body.append((_AND_K, 0, 0, mask))
        body += [(_JEQ, len(values) - i, 0, v) for i, v in enumerate(values)]  # a match jumps past the EPERM
        body.append(_errno(_EPERM))
    return body + [(_RET, 0, 0, _ALLOW)]


def _arg_rule(nr, rule, pid):
    """Instructions for one ARG_RULES entry: skipped unless the call is ``nr``; then (a ByCommand rule:
    for the listed commands) EPERM unless every condition holds, else allow."""
    if not isinstance(rule, ByCommand):
        body = _conditions(rule, pid)
    else:
        body = [(_LD_W_ABS, 0, 0, 16 + 8 * rule.index)]
        for command, conditions in rule.commands.items():
            block = _conditions(conditions, pid)  # ends in a return: the command stays loaded otherwise
            body += [(_JEQ, 0, len(block), command & 0xFFFFFFFF)] + block
        body.append((_RET, 0, 0, _ALLOW))
    return [(_JEQ, 0, len(body), nr)] + body


def _seccomp_program(pid):
    """The BPF program (a list of (code, jt, jf, k)) for the process ``pid``."""
    prog = [(_LD_W_ABS, 0, 0, 4), (_JEQ, 1, 0, AUDIT_ARCH), (_RET, 0, 0, _KILL), (_LD_W_ABS, 0, 0, 0)]
    if AUDIT_ARCH == 0xC000003E:
        prog += [(_JGE, 0, 1, 0x40000000), _errno(_EPERM)]  # x32 system calls
    prog += [(_JGE, 0, 1, LAST_AUDITED + 1), _errno(_ENOSYS)]
    for names in DENIED.values():
        for name in names:
            if name in NR:
                prog += [(_JEQ, 0, 1, NR[name]), _errno(_EPERM)]
    prog += [(_JEQ, 0, 1, NR["clone3"]), _errno(_ENOSYS)]  # libc falls back to clone, filtered below
    for name, conditions in ARG_RULES.items():
        prog += _arg_rule(NR[name], conditions, pid)
    prog.append((_RET, 0, 0, _ALLOW))
    return prog


def apply_seccomp():
    prog = _seccomp_program(os.getpid())
    filters = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), ctypes.cast(filters, ctypes.POINTER(_SockFilter)))
    _check(_libc.prctl(38, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(_libc.prctl(22, 2, ctypes.cast(ctypes.pointer(fprog), ctypes.c_void_p).value, 0, 0),
           "prctl(PR_SET_SECCOMP)")  # fmt: skip


# ---- everything -------------------------------------------------------------------------------------
def confine(layer, read_paths=(), scratch=None, scratch_mb=0, namespaces=False, network_ns=False, list_paths=(),
            hide_paths=(), keep_paths=(), landlock_abi=None, link_paths=(), max_tasks=None):  # fmt: skip
    """Apply ``layer`` ("landlock" | "namespaces") to this process; see the module doc. ``scratch`` is the
    only writable directory (None: nothing writable). ``namespaces`` / ``network_ns`` say whether the
    mount / network and IPC namespaces are used (the host probes what works): the mount namespace's root
    then holds only ``read_paths`` (:func:`build_root`; ``link_paths`` and this process's ``sys.path``:
    paths whose symbolic links are recreated in it); ``hide_paths`` / ``keep_paths``: see :func:`hide`;
    ``landlock_abi``: the Landlock ABI whose rights are handled (None: the kernel's; a lower one behaves
    as an older kernel); ``max_tasks``: where a user namespace was made, its ``RLIMIT_NPROC``
    (:func:`limit_tasks`; the host passes it when no pids cgroup bounds the program). Returns what was
    applied."""
    if layer not in ("landlock", "namespaces"):
        raise ConfineError(22, f"unknown isolation layer {layer!r}")
    done = {"layer": layer}
    if namespaces or layer == "namespaces":
        links = [p for p in (*link_paths, *sys.path) if isinstance(p, str) and p.startswith("/")]
        done.update(enter_namespaces(scratch if scratch_mb else None, scratch_mb, network_ns, read_paths,
                                     links, hide_paths, keep_paths))  # fmt: skip
        if max_tasks and done["userns"]:
            limit_tasks(max_tasks)
            done["max_tasks"] = max_tasks
    if layer == "landlock":
        writable = [scratch] if scratch else []
        # descriptors 0-2 as files: ``open("/dev/stdin")`` / ``open("/dev/stdout", "w")`` reach the files the
        # parent opened for them (pipes and ttys are not subject to Landlock anyway)
        done["landlock"] = apply_landlock(list(read_paths) + ["/dev/null", "/dev/zero", "/dev/urandom", 0],
                                          writable + ["/dev/null", 1, 2], landlock_abi,
                                          list_paths=list_paths)  # fmt: skip
    else:
        _check(_libc.prctl(38, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    drop_capabilities()
    apply_seccomp()
    done["seccomp"] = True
    return done
