"""Hostile scripts against the sandbox's own layers (RestrictedPython compile, run-time guards, OS limits).

Escape attempts run with ``check=False`` so the checker (tested in test_checker.py) is not what stops them.
Each test asserts the specific refusal: the execution's status and error.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from builders import HANG_MARGIN_S
from wf_helpers import role_reply

from metaagent.policy import ScriptedPolicy
from metaagent.workflow import check_script

AGENT = 'a = Agent("A", "p")\na(task)\n'


def run_raw(pool, source, limits=None, **kw):
    return pool.run(source, "q", ScriptedPolicy(role_reply), limits, check=False, **kw)


# ---- escapes through the language -------------------------------------------------------------------------

COMPILE_REFUSED = {  # RestrictedPython's compiler refuses these: status "invalid", nothing runs
    "dunder attribute": ("x = task.__class__", "__class__"),
    "f-string attribute": ('x = f"{task.__class__}"', "__class__"),
    "generator frame": ("g = (i for i in [1])\nx = g.gi_frame", "gi_frame"),
    "frame globals": ("def f():\n    return 1\nx = f.f_globals", "f_globals"),
    "exception traceback": (
        "try:\n    1 / 0\nexcept Exception as e:\n    x = e.__traceback__",
        "__traceback__",
    ),
    "__import__": ('os = __import__("os")', "__import__"),
    "builtins dict": ('e = __builtins__["eval"]', "__builtins__"),
    "guard rebinding": ("_getattr_ = lambda o, n: 1", "_getattr_"),
    "positional-only guard shadowing": (
        "def f(_getattr_=None, /):\n    return task.__class__\nx = f()",
        "_getattr_",
    ),
    "keyword guard shadowing": ("def f(*, _getitem_=None):\n    return 1", "_getitem_"),
    "agent internals": ("x = a._history", "_history"),
    "eval": ('x = eval("1")', "Eval"),
    "exec": ('exec("import os")', "Exec"),
}


@pytest.mark.parametrize("name", sorted(COMPILE_REFUSED))
def test_restricted_compiler_refuses(pool, name):
    snippet, word = COMPILE_REFUSED[name]
    ex = run_raw(pool, AGENT + snippet + "\n")
    assert ex.status == "invalid" and ex.error.type == "CompileError", ex.error
    assert word in ex.error.message and ex.turns == []


RUNTIME_REFUSED = {  # compiled, then stopped by the guards or the missing builtins: status "error"
    "format string": ('x = "{0.__class__}".format(task)', "AttributeError", "format"),
    "format_map": ('x = "{a.upper}".format_map({"a": task})', "AttributeError", "format_map"),
    "method resolution order": ("x = str.mro()", "AttributeError", "mro"),
    "getattr with a string": ('x = getattr(task, "__class__")', "NameError", "getattr"),
    "open": ('x = open("/etc/passwd")', "NameError", "open"),
    "globals": ("x = globals()", "NameError", "globals"),
    "type": ("x = type(task)", "NameError", "type"),
    "import os": ("import os", "ImportError", "__import__"),
    "importlib": ("import importlib\nimportlib.import_module('os')", "ImportError", "__import__"),
    "fork": ("import os\nos.fork()", "ImportError", "__import__"),
    "attribute write on an agent": ('a.name = "B"', "TypeError", "attribute-less"),
    "attribute write on a function": ("submit.x = 1", "TypeError", "attribute-less"),
    "SystemExit": ("raise SystemExit(0)", "NameError", "SystemExit"),
    "KeyboardInterrupt": ("raise KeyboardInterrupt", "NameError", "KeyboardInterrupt"),
    "print to a file": ('print("x", file=task)', "TypeError", "file"),
    "huge range": ("r = range(10 ** 12)", "ValueError", "range"),
}


@pytest.mark.parametrize("name", sorted(RUNTIME_REFUSED))
def test_runtime_guards_refuse(pool, name):
    snippet, kind, word = RUNTIME_REFUSED[name]
    ex = run_raw(pool, AGENT + snippet + "\n")
    assert ex.status == "error" and ex.error.type == kind, ex.error
    assert word in ex.error.message
    assert ex.error.line == 3  # the snippet's first line, after the two lines of AGENT


def test_builtins_shadowing_stays_inside_the_script(pool):
    src = AGENT + "len = lambda x: 0\nstr = None\nsubmit(f'{len(task)}')\n"
    assert "E-SHADOW" in [d.code for d in check_script(src).errors]
    ex = run_raw(pool, src)
    assert ex.status == "ok" and ex.answer == "0"
    again = run_raw(pool, AGENT + "submit(str(len(task)))\n")  # the next script on the worker is unaffected
    assert again.status == "ok" and again.answer == "1"


def test_catching_the_end_signal_by_name_is_impossible(pool):
    src = AGENT + "try:\n    submit('done')\nexcept BaseException as e:\n    x = e\n"
    ex = run_raw(pool, src)
    assert ex.status == "ok" and ex.submitted and ex.answer == "done"


def test_catching_everything_cannot_outlive_the_limits(pool):
    src = AGENT + "while True:\n    try:\n        a(task)\n    except:\n        pass\n"
    start = time.monotonic()
    ex = run_raw(pool, src, {"max_agent_calls": 5, "timeout_s": 1.0})
    assert time.monotonic() - start < 1.0 + HANG_MARGIN_S
    assert ex.status == "limit" and ex.error.type == "AgentCallLimit" and len(ex.turns) == 5


# ---- resources ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "snippet",
    [
        "while True:\n    pass",
        "x = 10 ** 10 ** 8",
        "x = 0\nfor i in range(10 ** 6):\n    for j in range(10 ** 6):\n        x += 1",
    ],
)
def test_endless_computation_times_out_at_the_limit(pool, snippet):
    src = AGENT + snippet + "\n"
    assert check_script(src).ok  # nothing static gives these away
    start = time.monotonic()
    ex = pool.run(src, "q", ScriptedPolicy(role_reply), {"timeout_s": 1.0})
    elapsed = time.monotonic() - start
    assert ex.status == "timeout" and ex.error.type == "Timeout"  # the mechanism: the limit stopped it
    assert elapsed < 1.0 + HANG_MARGIN_S
    assert len(ex.turns) == 1 and ex.answer == ex.turns[0].delivery  # what happened before is kept


@pytest.mark.parametrize(
    "snippet", ["x = 'a' * (10 ** 10)", "x = [0] * (10 ** 9)", "x = [[0] * 1000 for i in range(10 ** 6)]"]
)
def test_huge_allocations_hit_the_memory_limit(pool, snippet):
    ex = pool.run(
        AGENT + snippet + "\n", "q", ScriptedPolicy(role_reply), {"memory_mb": 256, "timeout_s": 10}
    )
    assert ex.status == "limit" and ex.error.type == "MemoryError" and "256 MB" in ex.error.message


def test_deep_recursion_is_an_error(pool):
    ex = pool.run(AGENT + "def f(n):\n    return f(n + 1)\nf(0)\n", "q", ScriptedPolicy(role_reply))
    assert ex.status == "error" and ex.error.type == "RecursionError" and ex.error.line == 4


def test_cpu_limit_backs_up_the_wall_clock(pool):
    ex = pool.run(
        AGENT + "while True:\n    pass\n", "q", ScriptedPolicy(role_reply), {"timeout_s": 10, "cpu_s": 1}
    )
    assert ex.status == "limit" and ex.error.type == "CpuLimit"


def test_printing_megabytes_is_cut_off(pool):
    ex = pool.run(
        AGENT + "print('x' * 10 ** 7)\n", "q", ScriptedPolicy(role_reply), {"max_output_chars": 1000}
    )
    assert ex.status == "limit" and ex.error.type == "OutputLimit"
    src = AGENT + "for i in range(100000):\n    try:\n        print('y' * 100)\n    except:\n        pass\n"
    ex = run_raw(pool, src, {"max_output_chars": 1000})
    assert ex.status == "limit" and ex.error.type == "OutputLimit"


def test_fork_is_refused_by_the_kernel_too(pool):
    """No module can be imported (see test_runtime_guards_refuse); below that, RLIMIT_NPROC = 0."""
    infos = pool.worker_info()
    assert infos
    if os.geteuid() == 0 and any(i["uid"] == 0 for i in infos):
        pytest.skip("root without permission to switch users: the kernel does not apply RLIMIT_NPROC to root")
    assert all(i["nproc_limited"] and i["uid"] != 0 for i in infos)
    if os.geteuid() == 0:
        assert all(i["dropped_privileges"] for i in infos)
    # the same hardening in a plain interpreter: fork() itself fails
    probe = (
        "import os\nfrom metaagent.workflow.worker import _harden\n_harden(True)\n"
        "try:\n    os.fork()\nexcept OSError as e:\n    print('refused', e.errno)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"refused {errno.EAGAIN}", out


def test_a_worker_that_dies_mid_script_is_reported_and_replaced(pool):
    started = threading.Event()

    def reply(request):
        started.set()
        return "<delivery>x</delivery>"

    result = {}
    thread = threading.Thread(
        target=lambda: result.update(
            ex=pool.run(AGENT + "while True:\n    pass\n", "q", ScriptedPolicy(reply), {"timeout_s": 20})
        )
    )
    before = {i["pid"] for i in pool.worker_info()}
    thread.start()
    assert started.wait(10)
    time.sleep(0.3)
    busy = [i["pid"] for i in pool.worker_info()]
    for pid in busy:  # kill every worker (the idle one too): as an OOM killer might
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    thread.join(10)
    ex = result["ex"]
    assert ex.status == "error" and ex.error.type == "WorkerCrash" and "SIGKILL" in ex.error.message
    assert pool.run(AGENT + "submit('fine')\n", "q", ScriptedPolicy(role_reply)).answer == "fine"
    assert {i["pid"] for i in pool.worker_info()}.isdisjoint(before)


def test_hostile_scripts_do_not_disturb_the_rest_of_the_batch(pool):
    hostile = [
        AGENT + "while True:\n    pass\n",
        AGENT + "x = 'a' * (10 ** 10)\n",
        AGENT + "def f(n):\n    return f(n + 1)\nf(0)\n",
        AGENT + "print('x' * 10 ** 7)\n",
    ]
    normal = 'a = Agent("A", "p")\nb = Agent("B", "p")\nsubmit(b(a(task)))\n'
    outcomes: dict[int, object] = {}

    def work(i, src):
        outcomes[i] = pool.run(
            src, f"task {i}", ScriptedPolicy(role_reply), {"timeout_s": 1.0, "memory_mb": 256}
        )

    jobs = [(i, hostile[(i // 2) % 4] if i % 2 else normal) for i in range(8)]
    threads = [threading.Thread(target=work, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(outcomes) == 8  # every job came back (none hung past its join) while hostile ones ran
    for i, _ in jobs:
        if i % 2 == 0:
            assert outcomes[i].status == "ok" and outcomes[i].answer == "The answer is \\boxed{5}."
        else:
            assert outcomes[i].status in ("timeout", "limit", "error")
