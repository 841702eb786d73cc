"""Child side of the isolation layer: confine the calling process with kernel mechanisms (ctypes only).

Imported by processes that are about to run model-written code: the code-test harness
(:mod:`._code_harness`, started with ``python -I -S``, so this module imports nothing outside the built-in
modules and ``ctypes``) and the workflow sandbox worker. The host side (which layer to use, which paths)
is :mod:`metaagent.execution.isolation`.

:func:`confine` applies, in this order (each step needs the previous one's privileges):

1. ``namespaces``: a private mount namespace (plus a user namespace when not root) in which the scratch
   directory becomes a size-limited tmpfs, and (``network_ns``) a fresh network namespace (only a down
   loopback); in the ``namespaces`` layer every other mount is also remounted read-only;
2. ``no_new_privs``;
3. Landlock (``landlock`` layer): reads only beneath the listed read-only paths, every file-system right
   only beneath the scratch directory, no TCP bind/connect (ABI >= 4), no signals to processes outside
   the domain and no connection to abstract Unix sockets created outside it (ABI >= 6);
4. all capabilities dropped (root keeps uid 0 but loses CAP_DAC_OVERRIDE, CAP_SYS_ADMIN, CAP_KILL, ...);
5. a seccomp filter: no new processes (fork, vfork, clone without CLONE_THREAD, clone3 -> ENOSYS so that
   libc falls back to clone; threads stay allowed), no execve, no socket() (socketpair stays: asyncio's
   self-pipe), no signals except to itself and its own process group, no ptrace / process_vm_* /
   unshare / setns / mount, no chmod / chown / xattr changes (Landlock does not cover metadata).

Every refusal is an ``OSError`` with ``EPERM`` (Landlock file access: ``EACCES``) in the program.
"""

import ctypes
import os

# ---- syscall numbers --------------------------------------------------------------------------------
_MACHINE = os.uname().machine  # not `platform`: its import costs ~2 ms per test program
if _MACHINE in ("x86_64", "AMD64"):
    AUDIT_ARCH = 0xC000003E
    NR = {
        "landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
        "unshare": 272, "mount": 165,
        "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "execve": 59, "execveat": 322,
        "socket": 41, "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
        "rt_tgsigqueueinfo": 297, "pidfd_send_signal": 424, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "setns": 308, "umount2": 166, "pivot_root": 155, "chroot": 161,
        "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "chown": 92, "fchown": 93,
        "lchown": 94, "fchownat": 260, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190,
        "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "open_by_handle_at": 304,
        "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323,
    }  # fmt: skip
elif _MACHINE in ("aarch64", "arm64"):
    AUDIT_ARCH = 0xC00000B7
    NR = {
        "landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
        "unshare": 97, "mount": 40,
        "clone": 220, "clone3": 435, "execve": 221, "execveat": 281,
        "socket": 198, "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138,
        "rt_tgsigqueueinfo": 240, "pidfd_send_signal": 424, "ptrace": 117, "process_vm_readv": 270,
        "process_vm_writev": 271, "setns": 268, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "fchmod": 52, "fchmodat": 53, "fchmodat2": 452, "fchown": 55, "fchownat": 54,
        "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
        "fremovexattr": 16, "open_by_handle_at": 265, "keyctl": 219, "add_key": 217, "request_key": 218,
        "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
    }  # fmt: skip
else:  # pragma: no cover - other architectures: no layer is available
    AUDIT_ARCH = None
    NR = {}

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


def apply_landlock(read_paths, write_paths, abi=None):
    """Restrict this process (and anything it could start) with one Landlock domain. A path may also be
    an open file descriptor (an int: e.g. 0 so that ``open("/dev/stdin")`` reaches the test input file).
    Returns what was enforced: {"abi", "fs", "net", "scope"}."""
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
        for paths, access in ((read_paths, read), (write_paths, write)):
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
                    allowed = access if is_dir else access & _FILE_RIGHTS
                    rule = _PathBeneathAttr(allowed & handled, pfd)
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
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18
)
_MOUNT_FLAGS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
                "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21}  # fmt: skip


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


def enter_namespaces(scratch=None, scratch_mb=0, network=True, readonly_rest=False):
    """Private mount namespace (tmpfs of ``scratch_mb`` MB on ``scratch``; with ``readonly_rest`` every
    other mount read-only) and, with ``network``, an empty network namespace. Returns what was done."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | (CLONE_NEWNET if network else 0) | (CLONE_NEWUSER if uid != 0 else 0)
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
    if readonly_rest:
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
        for fields in mounts:
            target = fields[4]
            for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
                target = target.replace(code, char)  # mountinfo's octal escapes (no codec lookups here)
            keep = 0
            for opt in fields[5].split(","):
                keep |= _MOUNT_FLAGS.get(opt, 0)
            try:
                _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep, None)
            except ConfineError:
                pass  # over-mounted or vanished mounts; /proc and /sys stay what they are
    if scratch:
        _mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV,
               f"size={max(1, int(scratch_mb))}m,mode=0700,uid={uid},gid={gid}")  # fmt: skip
        os.chdir(scratch)  # the old cwd is the directory under the mount
    return {"mount": True, "net": bool(network), "scratch_mb": scratch_mb if scratch else 0}


# ---- capabilities -----------------------------------------------------------------------------------
class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities():
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


# ---- seccomp ----------------------------------------------------------------------------------------
_LD_W_ABS, _JEQ, _JSET, _JGE, _RET = 0x20, 0x15, 0x45, 0x35, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000
_EPERM, _ENOSYS = 1, 38
CLONE_THREAD = 0x00010000
_DENIED = (
    "fork", "vfork", "execve", "execveat", "socket", "tkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "pidfd_send_signal", "ptrace", "process_vm_readv", "process_vm_writev", "unshare", "setns", "mount",
    "umount2", "pivot_root", "chroot", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown",
    "lchown", "fchownat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
    "fremovexattr", "open_by_handle_at", "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
    "userfaultfd",
)  # fmt: skip


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _seccomp_program(pid):
    """The BPF program (a list of (code, jt, jf, k)); ``pid`` is the only process signals may reach."""
    errno = lambda e: (_RET, 0, 0, 0x00050000 | e)  # noqa: E731
    prog = [(_LD_W_ABS, 0, 0, 4), (_JEQ, 1, 0, AUDIT_ARCH), (_RET, 0, 0, _KILL), (_LD_W_ABS, 0, 0, 0)]
    if AUDIT_ARCH == 0xC000003E:
        prog += [(_JGE, 0, 1, 0x40000000), errno(_EPERM)]  # x32 system calls
    for name in _DENIED:
        if name in NR:
            prog += [(_JEQ, 0, 1, NR[name]), errno(_EPERM)]
    prog += [(_JEQ, 0, 1, NR["clone3"]), errno(_ENOSYS)]
    # clone: allowed only for threads (flags are args[0]; offset 16 is its low 32 bits)
    prog += [(_JEQ, 0, 4, NR["clone"]), (_LD_W_ABS, 0, 0, 16), (_JSET, 0, 1, CLONE_THREAD),
             (_RET, 0, 0, _ALLOW), errno(_EPERM)]  # fmt: skip
    # kill(pid, sig): only itself (pid), its process group (0 or -pid); tgkill(tgid, ...): only itself
    own = (0, pid, (-pid) & 0xFFFFFFFF)
    prog += [(_JEQ, 0, 6, NR["kill"]), (_LD_W_ABS, 0, 0, 16)]
    prog += [(_JEQ, 3 - i, 0, value) for i, value in enumerate(own)]
    prog += [errno(_EPERM), (_RET, 0, 0, _ALLOW)]
    prog += [(_JEQ, 0, 4, NR["tgkill"]), (_LD_W_ABS, 0, 0, 16), (_JEQ, 1, 0, pid), errno(_EPERM),
             (_RET, 0, 0, _ALLOW)]  # fmt: skip
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
def confine(layer, read_paths=(), scratch=None, scratch_mb=0, namespaces=False, network_ns=False):
    """Apply ``layer`` ("landlock" | "namespaces") to this process; see the module doc. ``scratch`` is the
    only writable directory (None: nothing writable). ``namespaces`` / ``network_ns`` say whether the
    mount / network namespaces are used (the host probes what works). Returns what was applied."""
    if layer not in ("landlock", "namespaces"):
        raise ConfineError(22, f"unknown isolation layer {layer!r}")
    done = {"layer": layer}
    if namespaces or layer == "namespaces":
        done.update(enter_namespaces(scratch if scratch_mb else None, scratch_mb, network_ns,
                                     readonly_rest=layer == "namespaces"))  # fmt: skip
    if layer == "landlock":
        writable = [scratch] if scratch else []
        # descriptors 0-2 as files: ``open("/dev/stdin")`` / ``open("/dev/stdout", "w")`` reach the files the
        # parent opened for them (pipes and ttys are not subject to Landlock anyway)
        done["landlock"] = apply_landlock(list(read_paths) + ["/dev/null", "/dev/zero", "/dev/urandom", 0],
                                          writable + ["/dev/null", 1, 2])  # fmt: skip
    else:
        _check(_libc.prctl(38, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    drop_capabilities()
    apply_seccomp()
    done["seccomp"] = True
    return done
