"""Child side of the code runner: run one program on one test under OS limits.

Started by :mod:`metaagent.execution.code_runner` as ``python -I -S _code_harness.py spec.py`` in a fresh
temporary directory, in its own session, with a clean environment, stdin from the test input and
stdout/stderr redirected to files. It

1. reads the spec (a Python literal written by the parent) and deletes it, so the program cannot read the
   result nonce from disk,
2. sets resource limits: address space, CPU seconds (inherited by any child, so an escaped busy loop
   dies too), output file size, no core files,
3. confines itself with the isolation layer the parent chose (``spec["isolation"]``, the keyword
   arguments of :func:`_confine.confine`: Landlock / namespaces, no capabilities, a seccomp filter; see
   :mod:`metaagent.execution.isolation`); if that fails the program is not run (status ``isolation``),
4. disables process creation and signalling at the Python level too (``os.fork``, ``os.system``, the
   ``fork_exec`` behind ``subprocess``, ``os.kill`` ...), which gives clear errors for the common
   accidents; the kernel layer is what holds when a program goes around them (``ctypes``). Without a
   kernel layer, destructive file-system calls (``os.remove``, ``os.rename`` ... which also stops
   ``shutil.rmtree``) are disabled too; under one they work inside the program's own temporary directory
   only. The parent also kills the whole process group,
5. runs the program (stdio: as ``__main__``; call: calls ``fn_name``; assert: runs the test source),
6. writes ``result.txt`` (a literal with the nonce), so a program that exits early cannot pass.

The expected output never reaches this process: the parent compares. Start-up cost matters (one process
per test), so only built-in modules are imported here; ``traceback`` is imported when a program fails.
"""

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
    memory, cpu, size = spec["memory_bytes"], spec["cpu_seconds"], spec["file_bytes"]
    for which, soft, hard in (
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, size, size),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        resource.setrlimit(which, (soft, hard))


def _guard(confined):
    import _posixsubprocess  # built in: what subprocess and multiprocessing use to start processes

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


def _run(spec, program_source):
    """Run the program; returns ``(status, value)``; raises whatever the program raises."""
    mode = spec["mode"]
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
    tests = compile(spec["test_source"], "tests.py", "exec") if mode == "assert" else None
    _add_prelude(namespace, code, *([tests] if tests else []))
    sys.modules["solution"] = module
    exec(code, namespace)  # noqa: S102 - running the program is the point
    if mode == "call":
        name = spec["fn_name"]
        solution = namespace.get("Solution")
        if isinstance(solution, type) and hasattr(solution, name):
            target = getattr(solution(), name)
        elif callable(namespace.get(name)):
            target = namespace[name]
        else:
            raise NameError(
                f"the program defines no function {name!r} (nor a Solution class with that method)"
            )
        return "ok", target(*spec["args"])
    exec(tests, namespace)  # noqa: S102 - running the program is the point
    entry = spec.get("entry_point")
    if entry and callable(namespace.get("check")):
        if not callable(namespace.get(entry)):
            raise NameError(f"the program defines no function {entry!r}")
        namespace["check"](namespace[entry])
    return "ok", None


def main():
    spec_path = sys.argv[1]
    with open(spec_path, encoding="utf-8") as f:
        spec = eval(
            f.read(), {"__builtins__": {}, "inf": float("inf"), "nan": float("nan")}
        )  # parent's literal
    os.unlink(spec_path)
    nonce = spec["nonce"]
    with open(spec["program"], encoding="utf-8") as f:
        program_source = f.read()
    result_path = os.path.abspath(spec["result"])
    write, close, exit_, stdout_flush = os.write, os.close, os._exit, sys.stdout.flush
    lseek, ftruncate = os.lseek, os.ftruncate
    # opened before the isolation layer turns the directory into a private tmpfs the parent cannot see
    result_fd = os.open(result_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    confine = None
    if spec.get("isolation"):
        sys.path.insert(0, spec["confine_dir"])
        try:
            from _confine import confine
        finally:
            del sys.path[0]
    sys.setrecursionlimit(10_000)
    _set_limits(spec)
    if confine is not None:
        try:
            applied = confine(**spec["isolation"])
        except BaseException as e:  # noqa: BLE001 - never run the program unconfined
            payload = repr({"nonce": nonce, "status": "isolation", "value": "None", "error": f"{type(e).__name__}: {e}"})
            write(result_fd, payload.encode("utf-8", "replace"))
            exit_(0)
        del applied
    _guard(confined=confine is not None)

    error, value = "", None
    try:
        status, value = _run(spec, program_source)
        _join_program_threads()
        if status == "exit":
            status, error, value = "exception", value, None
    except MemoryError:
        status, error = "memory", "MemoryError"
    except AssertionError:
        status, error = "assertion", _program_traceback()
    except SystemExit as e:
        status, error = "exception", f"the program called exit({e.code!r}) before the test finished"
    except BaseException:  # noqa: BLE001 - the program's own error
        status, error = "exception", _program_traceback()
    try:
        stdout_flush()
    except OSError as e:
        if status == "ok":
            status, error = "output_limit", str(e)
    except MemoryError:
        status, error = "memory", "MemoryError"
    try:
        shown = repr(value)
    except BaseException as e:  # noqa: BLE001 - a broken __repr__ or a structure too deep to print
        status, error, shown = "exception", f"the return value cannot be printed: {type(e).__name__}", "None"
    payload = repr({"nonce": nonce, "status": status, "value": shown, "error": error[-4000:]})
    data = payload.encode("utf-8", "replace")
    lseek(result_fd, 0, 0)  # the program may have written to the inherited descriptor
    write(result_fd, data)
    ftruncate(result_fd, len(data))
    close(result_fd)
    exit_(0)


if __name__ == "__main__":
    main()
