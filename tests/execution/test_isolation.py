"""The isolation layer against hostile programs: one test per property, each through the code-test runner
and through a workflow script's ``run_program`` tool, asserting the kernel's specific refusal.

The programs go around the Python-level guards of the harness (``ctypes`` for fork and kill, ``os.open``
for files), so what refuses them is the kernel layer. The tests run as whatever user runs the suite (root
in CI: Landlock, seccomp and the dropped capabilities hold for root too). After each test the host is
checked: planted files unchanged, nothing new in $HOME, a normal program still passes.
"""

from __future__ import annotations

import os
import signal
import socket
import textwrap
import threading
from pathlib import Path

import pytest

from metaagent.data.tasks import Task
from metaagent.execution import isolation
from metaagent.execution.code import run_code_tests
from metaagent.policy import ScriptedPolicy
from metaagent.workflow import SandboxPool
from metaagent.workflow.tools import default_tools

ISO = isolation.active()
pytestmark = pytest.mark.skipif(ISO.layer == "none", reason=f"no isolation layer on this machine: {ISO.reason}")
LANDLOCK = ISO.layer == "landlock"
#: what a write outside the scratch directory fails with: Landlock EACCES, read-only mounts EROFS
WRITE_DENIED = "EACCES" if LANDLOCK else "EROFS"

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
    assert out.split("\n")[:3] == [f"REFUSED {WRITE_DENIED}", f"REFUSED {WRITE_DENIED}", "ESCAPED 2"]


@VIAS
def test_truncating_an_existing_file_is_refused(host, via, pool):
    out = run_hostile(f"""
        attempt(lambda: os.open({str(host["ckpt"])!r}, os.O_WRONLY | os.O_TRUNC))
        attempt(lambda: c_call(libc.truncate({str(host["ckpt"]).encode()!r}, 0)) and None)
    """, via, pool)  # fmt: skip
    assert out.split("\n")[:2] == [f"REFUSED {WRITE_DENIED}"] * 2


@pytest.mark.skipif(not LANDLOCK, reason="reads are restricted by the landlock layer only")
@VIAS
def test_reading_a_file_in_home_is_refused(host, via, pool):
    out = run_hostile(f"attempt(lambda: open({str(host['secret'])!r}).read())\n", via, pool)
    assert out.startswith("REFUSED EACCES") and "secret" not in out


@pytest.mark.skipif(not LANDLOCK, reason="reads are restricted by the landlock layer only")
@VIAS
def test_listing_the_run_directory_is_refused(host, via, pool):
    out = run_hostile(f"attempt(lambda: os.listdir({str(host['run'])!r}))\n", via, pool)
    assert out.startswith("REFUSED EACCES") and "checkpoint" not in out


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
    expected_read = "REFUSED EACCES" if LANDLOCK else "ESCAPED 'top secret'"
    assert out.split("\n")[:2] == [expected_read, f"REFUSED {WRITE_DENIED}"]


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
