"""Child side of the code runner: run one program on one test under OS limits.

Started by :mod:`metaagent.execution.code_runner` as ``python -I -S _code_harness.py spec.py`` in a fresh
temporary directory, in its own session, with a clean environment, stdin from the test input and
stdout/stderr redirected to files. It

1. reads the spec (a Python literal written by the parent) and deletes it, so the program cannot read the
   result nonce from disk; when the parent gave the program a memory cgroup
   (:mod:`metaagent.execution.cgroup`), waits until the parent has moved it there (``spec["go_fd"]``),
2. sets resource limits: address space, CPU seconds (inherited by any child, so an escaped busy loop
   dies too), output file size, open files, no core files,
3. confines itself with the isolation layer the parent chose (``spec["isolation"]``, the keyword
   arguments of :func:`_confine.confine`: Landlock / namespaces, no capabilities, a seccomp filter; see
   :mod:`metaagent.execution.isolation`); if that fails the program is not run (status ``isolation``),
4. disables process creation and signalling at the Python level too (``os.fork``, ``os.system``, the
   ``fork_exec`` behind ``subprocess``, ``os.kill`` ...), which gives clear errors for the common
   accidents; the kernel layer is what holds when a program goes around them (``ctypes``). Without a
   kernel layer, destructive file-system calls (``os.remove``, ``os.rename`` ... which also stops
   ``shutil.rmtree``) are disabled too; under one they work inside the program's own temporary directory
   only. The parent also kills the whole process group,
5. runs the program (stdio: as ``__main__``; call: calls ``fn_name``; serve: answers the calls of an
   assert test's judge, see below),
6. writes ``result.txt`` (a literal with the nonce), so a program that exits early cannot pass.

The expected output never reaches the program's process: the parent compares. Assert tests (HumanEval's
``check(candidate)``) run in two processes: this harness in mode ``serve`` runs the program and answers
calls ``(name, args, kwargs)`` with ``repr`` of the result on a pipe; a second harness in mode ``judge``
(the test source in its own spec, its own confinement, no access to the program's files or memory) runs
the test with every program function it mentions replaced by a stub that asks the server and reads the
answer back as plain data (:mod:`._plain`). So the verdict is decided by a process the program cannot
reach: patched builtins, objects that equal everything, frames and the result channel of the program's
own process decide nothing. Start-up cost matters (one process per test), so the program side imports
only built-in modules; ``traceback`` is imported when a program fails.
"""

import _posixsubprocess  # built in: what subprocess and multiprocessing use to start processes
import builtins
import os
import resource
import sys

#: Names that LeetCode / HumanEval style code uses without importing them, and where they come from.
#: Only the names a program (or its test source) actually mentions are imported into its namespace.
PRELUDE = {
    **{
        name: ("typing", name)
        for name in (
            "List",
            "Dict",
            "Tuple",
            "Set",
            "FrozenSet",
            "Optional",
            "Any",
            "Union",
            "Callable",
            "Iterable",
            "Iterator",
            "Sequence",
            "Generator",
            "Deque",
            "DefaultDict",
        )
    },
    **{
        name: (name, None)
        for name in ("collections", "math", "heapq", "bisect", "itertools", "functools", "string", "re")
    },
    **{name: ("collections", name) for name in ("Counter", "defaultdict", "deque", "OrderedDict")},
    **{name: ("functools", name) for name in ("lru_cache", "cache", "reduce")},
    **{name: ("itertools", name) for name in ("accumulate", "permutations", "combinations", "product")},
    **{name: ("heapq", name) for name in ("heappush", "heappop", "heapify")},
    **{name: ("bisect", name) for name in ("bisect_left", "bisect_right")},
    **{name: ("math", name) for name in ("inf", "gcd", "sqrt", "ceil", "floor", "log", "comb")},
}

GUARDED_OS = (
    "fork",
    "forkpty",
    "system",
    "popen",
    "execv",
    "execve",
    "execl",
    "execle",
    "execlp",
    "execlpe",
    "execvp",
    "execvpe",
    "spawnv",
    "spawnve",
    "spawnl",
    "spawnle",
    "spawnlp",
    "spawnlpe",
    "spawnvp",
    "spawnvpe",
    "posix_spawn",
    "posix_spawnp",
    "kill",
    "killpg",
    "setsid",
    "setpgid",
    "setpgrp",
)

#: file-system calls refused at the Python level only when no kernel layer confines the program (under
#: Landlock / namespaces they work inside the program's own temporary directory: tempfile, shutil)
GUARDED_FILES = (
    "remove",
    "unlink",
    "rmdir",
    "removedirs",
    "rename",
    "renames",
    "replace",
    "truncate",
    "chmod",
    "chown",
    "lchown",
    "fchmod",
    "fchown",
    "putenv",
    "unsetenv",
    "chdir",
    "fchdir",
    "chroot",
)

GUARDED_IDS = (
    "setuid",
    "setgid",
    "seteuid",
    "setegid",
    "setreuid",
    "setregid",
)


def _disabled(name):
    def refuse(*args, **kwargs):
        raise PermissionError(f"{name} is disabled while running tests")

    return refuse


def _set_limits(spec):
    memory, cpu, size, files = spec["memory_bytes"], spec["cpu_seconds"], spec["file_bytes"], spec["open_files"]
    for which, soft, hard in (
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, size, size),
        (resource.RLIMIT_NOFILE, files, files),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        resource.setrlimit(which, (soft, hard))


def _guard(confined):
    for name in GUARDED_OS + GUARDED_IDS + (() if confined else GUARDED_FILES):
        if hasattr(os, name):
            setattr(os, name, _disabled("os." + name))
    _posixsubprocess.fork_exec = _disabled("starting a process")
    builtins.exit = builtins.quit = sys.exit  # `site` (which defines them) is not imported under -S


def _names(code):
    """Every name a code object and its nested code objects mention."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names


def _add_prelude(namespace, *codes):
    wanted = set()
    for code in codes:
        wanted |= _names(code)
    for name in sorted(wanted & PRELUDE.keys()):
        module_name, attr = PRELUDE[name]
        module = __import__(module_name)
        namespace[name] = module if attr is None else getattr(module, attr)


def _program_traceback(limit=6):
    """The current exception's traceback without this harness's own frames."""
    import traceback

    exc_type, exc, tb = sys.exc_info()
    frames = [f for f in traceback.extract_tb(tb) if f.filename != __file__][-limit:]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames) + traceback.format_exception_only(exc_type, exc)
    return "".join(lines)


def _join_program_threads():
    """Wait for threads the program started (``threading.Thread(target=main).start()`` is a common idiom)."""
    threading = sys.modules.get("threading")
    if threading is None:
        return
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()


# ---- assert tests: the program serves calls, the judge decides ------------------------------------
MAX_FRAME = 8 << 20  # bytes of one answer of the program (larger: the judge counts it as not plain)
_HEADER = 4


def _send(fd, text):
    data = text.encode("utf-8", "backslashreplace")
    data = len(data).to_bytes(_HEADER, "big") + data
    while data:
        data = data[os.write(fd, data) :]


def _recv_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv(fd, limit=None):
    """One frame as text; None at end of file; ``limit``: larger frames raise OverflowError."""
    header = _recv_exact(fd, _HEADER)
    if header is None:
        return None
    size = int.from_bytes(header, "big")
    if limit is not None and size > limit:
        raise OverflowError(f"an answer of {size} bytes (the limit is {limit})")
    data = _recv_exact(fd, size)
    return None if data is None else data.decode("utf-8", "replace")


def _serve(namespace, requests, answers):
    """Program side of an assert test: announce the program's callables, then answer every call until the
    judge closes the pipe. Requests come from the judge (literals of plain data)."""
    names = sorted(n for n, v in list(namespace.items()) if isinstance(n, str) and callable(v))
    _send(answers, repr(names))
    literals = {"__builtins__": {}, "inf": float("inf"), "nan": float("nan")}
    while True:
        request = _recv(requests)
        if request is None:
            return
        name, args, kwargs = eval(request, literals)  # noqa: S307 - the judge's repr of plain data
        try:
            if name not in namespace:
                raise NameError(f"the program defines no function {name!r}")
            answer = "ok " + repr(_crossing(namespace[name](*args, **kwargs)))
        except MemoryError:
            raise
        except BaseException as e:  # noqa: BLE001 - the program's exception goes to the judge
            try:
                answer = "error " + repr((type(e).__name__, str(e)[:2000]))
            except BaseException:  # noqa: BLE001 - an exception whose str() fails
                answer = "error " + repr((type(e).__name__, ""))
        _send(answers, answer)


#: the dict types of the standard library's ``collections`` (Counter, OrderedDict, defaultdict): a returned
#: value holding one crosses with it as a plain dict of its items (:func:`_crossing`)
COLLECTIONS_DICTS = ("Counter", "OrderedDict", "defaultdict")
_WALKED = (list, tuple, set, frozenset)
_WALK_DEPTH = 100  # _plain.MAX_DEPTH: a value nested deeper is refused as not plain data anyway


def _crossing(value):
    """``value`` as it crosses to the judge or the parent (then read back as plain data): every instance of
    the :data:`COLLECTIONS_DICTS` types (exact types), at any depth inside lists, tuples, sets and dicts,
    becomes the plain dict of its items, which a test compares as Python compares the original with a dict
    (``Counter("aab") == {"a": 2, "b": 1}``). Anything else is unchanged: what its ``repr`` writes crosses,
    read back only when that is a plain literal. Only data crosses either way, so this cannot forge a
    verdict."""
    collections = sys.modules.get("collections")  # not loaded: the program cannot hold one of its types
    kinds = tuple(
        kind
        for kind in (getattr(collections, name, None) for name in COLLECTIONS_DICTS)
        if isinstance(kind, type)
    )
    if not kinds:
        return value

    def walk(item, depth):
        kind = type(item)
        if depth > _WALK_DEPTH:
            return item
        if kind in kinds or kind is dict:
            return {walk(key, depth + 1): walk(each, depth + 1) for key, each in dict.items(item)}
        if kind in _WALKED:
            return kind(walk(each, depth + 1) for each in item)
        return item

    return walk(value, 0)


class _ProgramEnded(BaseException):
    """The program's process stopped answering (exited, crashed, was killed); not catchable by tests."""


class _Unsupported(BaseException):
    """The test passes something that is not plain data to the program: it cannot be judged this way."""


#: what the judge saw of the program (reported with its verdict): calls made, answers that were not plain
#: data, whether the program stopped answering
JUDGE_COUNTS = {"calls": 0, "non_plain_value": 0, "early_exit": 0}


def _judge(spec):
    """Judge side of an assert test: run the test source with stubs for the program's functions.
    Returns ``(status, message)``; raises what the test raises (AssertionError: the test failed)."""
    import _plain  # noqa: PLC0415 - next to this file; the program's process never imports it

    requests, answers = spec["requests_fd"], spec["answers_fd"]
    counts = JUDGE_COUNTS
    hello = _recv(answers, MAX_FRAME)
    if hello is None:
        counts["early_exit"] += 1
        return "program_ended", None
    offered = _plain.parse(hello)
    tests = compile(spec["test_source"], "tests.py", "exec")
    namespace = {"__builtins__": builtins, "__name__": "tests"}
    _add_prelude(namespace, tests)

    def stub(name):
        def call(*args, **kwargs):
            if not (_plain.is_plain(args) and _plain.is_plain(kwargs)):
                raise _Unsupported(f"the test calls {name}() with a value that is not plain data")
            counts["calls"] += 1
            _send(requests, repr((name, args, kwargs)))
            try:
                answer = _recv(answers, MAX_FRAME)
            except OverflowError as e:
                counts["non_plain_value"] += 1
                raise TypeError(f"{name}() returned {e}") from None
            if answer is None:
                counts["early_exit"] += 1
                raise _ProgramEnded(f"the program stopped during a call of {name}()")
            kind, _, body = answer.partition(" ")
            try:
                value = _plain.parse(body)
            except _plain.NotPlain as e:
                counts["non_plain_value"] += 1
                raise TypeError(f"{name}() returned a value that is not plain data ({e})") from None
            if kind == "ok":
                return value
            if kind == "error" and type(value) is tuple and [type(v) for v in value] == [str, str]:
                kind = getattr(builtins, value[0], None)
                if not (isinstance(kind, type) and issubclass(kind, Exception)):
                    kind = RuntimeError
                raise kind(value[1])
            counts["non_plain_value"] += 1
            raise TypeError(f"{name}() gave a malformed answer")

        call.__name__ = call.__qualname__ = name
        return call

    entry, stubs = spec.get("entry_point"), {}
    if type(offered) is list:
        # a builtin or prelude name stays the test's own (the program cannot redefine what the test uses to
        # compute the expected side), except the task's entry point: the function the task asks for (MBPP's
        # `def sum(a, b)`, which its tests call)
        for name in _names(tests) & {n for n in offered if type(n) is str and n.isidentifier()}:
            if name == entry or not (hasattr(builtins, name) or name in PRELUDE):
                namespace[name] = stubs[name] = stub(name)
    try:
        exec(tests, namespace)  # noqa: S102 - the task's own test source (trusted), never the program
        check = namespace.get("check")
        if entry and callable(check) and check is not stubs.get("check"):  # the test's own check (HumanEval)
            check(stub(entry))
    except _ProgramEnded as e:
        return "program_ended", str(e)
    except _Unsupported as e:
        return "unsupported", str(e)
    return "ok", None


def _run(spec, program_source):
    """Run the program; returns ``(status, value)``; raises whatever the program raises."""
    mode = spec["mode"]
    if mode == "judge":
        return _judge(spec)
    code = compile(program_source, "program.py", "exec")
    module = type(sys)("__main__" if mode == "stdio" else "solution")
    module.__dict__["__builtins__"] = builtins
    namespace = module.__dict__
    if mode == "stdio":
        sys.modules["__main__"] = module
        try:
            exec(code, namespace)  # noqa: S102 - running the program is the point
        except SystemExit as e:
            if e.code not in (None, 0):
                return "exit", f"the program called exit({e.code!r})"
        return "ok", None
    _add_prelude(namespace, code)
    sys.modules["solution"] = module
    exec(code, namespace)  # noqa: S102 - running the program is the point
    if mode == "serve":
        _serve(namespace, spec["requests_fd"], spec["answers_fd"])
        return "ok", None
    name = spec["fn_name"]
    solution = namespace.get("Solution")
    if isinstance(solution, type) and hasattr(solution, name):
        target = getattr(solution(), name)
    elif callable(namespace.get(name)):
        target = namespace[name]
    else:
        raise NameError(f"the program defines no function {name!r} (nor a Solution class with that method)")
    return "ok", target(*spec["args"])


def _read_spec(spec_path):
    """The parent's spec (a Python literal, deleted once read: the program cannot read the nonce from disk)
    and the program's source ("" for the judge)."""
    with open(spec_path, encoding="utf-8") as f:
        spec = eval(
            f.read(), {"__builtins__": {}, "inf": float("inf"), "nan": float("nan")}
        )  # parent's literal
    os.unlink(spec_path)
    program_source = ""
    if spec.get("program"):
        with open(spec["program"], encoding="utf-8") as f:
            program_source = f.read()
    return spec, program_source


def _import_confine(spec):
    """The isolation layer's ``confine`` (None when the parent chose none), imported from the package directory
    before confinement makes it unreadable; the judge's ``_plain`` likewise."""
    confine = None
    sys.path.insert(0, spec["confine_dir"])
    try:
        if spec.get("isolation"):
            from _confine import confine
        if spec["mode"] == "judge":
            import _plain  # noqa: F401 - before confinement: the package directory is not readable after
    finally:
        del sys.path[0]
    return confine


def _run_to_status(spec, program_source):
    """Run the program and classify how it ended: ``(status, error, value)``."""
    error, value = "", None
    try:
        status, value = _run(spec, program_source)
        _join_program_threads()
        if status == "exit":
            status, error, value = "exception", value, None
        elif status in ("program_ended", "unsupported"):  # the judge's
            error, value = value or "", None
    except MemoryError:
        status, error = "memory", "MemoryError"
    except AssertionError:
        status, error = "assertion", _program_traceback()
    except SystemExit as e:
        status, error = "exception", f"the program called exit({e.code!r}) before the test finished"
    except BaseException:  # noqa: BLE001 - the program's own error
        status, error = "exception", _program_traceback()
    return status, error, value


def main():
    spec_path = sys.argv[1]
    spec, program_source = _read_spec(spec_path)
    nonce = spec["nonce"]
    result_path = os.path.abspath(spec["result"])
    # the result is written with functions bound here, before the program runs (it may rebind os's names)
    write, close, exit_, stdout_flush = os.write, os.close, os._exit, sys.stdout.flush
    lseek, ftruncate = os.lseek, os.ftruncate
    # opened before the isolation layer turns the directory into a private tmpfs the parent cannot see
    result_fd = os.open(result_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)

    def fail_setup(e):
        error = f"{type(e).__name__}: {e}"
        payload = repr({"nonce": nonce, "status": "isolation", "value": "None", "error": error})
        write(result_fd, payload.encode("utf-8", "replace"))
        exit_(0)

    confine = _import_confine(spec)
    if spec.get("go_fd") is not None:  # the parent moves this process into its memory cgroup meanwhile
        if os.read(spec["go_fd"], 1) != b"1":
            fail_setup(OSError("the parent could not move this process into its memory cgroup"))
        os.close(spec["go_fd"])
    sys.setrecursionlimit(10_000)
    _set_limits(spec)
    if confine is not None:
        try:
            applied = confine(**spec["isolation"])
        except BaseException as e:  # noqa: BLE001 - never run the program unconfined
            fail_setup(e)
        del applied
    _guard(confined=confine is not None)

    status, error, value = _run_to_status(spec, program_source)
    try:
        stdout_flush()
    except OSError as e:
        if status == "ok":
            status, error = "output_limit", str(e)
    except MemoryError:
        status, error = "memory", "MemoryError"
    try:
        shown = repr(_crossing(value))
    except BaseException as e:  # noqa: BLE001 - a broken __repr__ or a structure too deep to print
        status, error, shown = "exception", f"the return value cannot be printed: {type(e).__name__}", "None"
    result = {"nonce": nonce, "status": status, "value": shown, "error": error[-4000:]}
    if spec["mode"] == "judge":
        result["counts"] = dict(JUDGE_COUNTS)
    payload = repr(result)
    data = payload.encode("utf-8", "replace")
    lseek(result_fd, 0, 0)  # the program may have written to the inherited descriptor
    write(result_fd, data)
    ftruncate(result_fd, len(data))
    close(result_fd)
    exit_(0)


if __name__ == "__main__":
    main()
