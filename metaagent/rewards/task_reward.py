"""A domain's registered reward ``reward(task, answer) -> float`` (:func:`metaagent.domain.register_reward`, the
``data.rewards`` / ``metaagent-eval --rewards`` specs), run under a deadline.

The function runs in a helper process of a :class:`~metaagent.execution.worker_pool.WorkerPool`, the machinery
math-verify's checks run in (:mod:`.math`), not in the scoring thread. A Python thread cannot be stopped, so a
function that hangs in a thread would hold that thread (and, spinning, a core) for the rest of the run; a helper
process is killed at the deadline with everything it started, and the pool starts a fresh one for the next call.
The deadline is ``reward.task_reward_timeout_s``: CPU seconds of the helper, as for math checks and code tests;
the wall clock allows ``WALL_FACTOR`` (3) times as much, which is what stops a function that waits (a sleep, a
network call that never answers).

What the helper gets: the function pickled with cloudpickle (a function of an importable module by reference:
the helper imports that module once, and the caller's ``sys.path`` goes with every request; a lambda, a closure
or a function of ``__main__`` by value, with what it refers to), a copy of the task and the answer. A reward
module loaded from a ``.py`` file (``my_rewards.py:exact``) is imported in the helper from the same file. So the
function works on copies: what it changes (a list it appends to, a counter) changes in the helper, not in the
caller, and what a closure captures is sent with each call (keep it small; load big things in its module).

Another process that scores executions (a Ray sandbox actor, maybe on another machine) knows none of the
rewards registered here: :func:`reward_bundle` packs them the same way (each function pickled, ``sys.path``,
and the source of each reward module loaded from a ``.py`` file, which may not exist over there) and
:func:`load_rewards` unpacks them there for :func:`~.score.score_execution`'s ``rewards``.

The verdict: a number in [0, 1] (a bool counts as 0 or 1) is R_correct. Everything else is a reward error,
recorded in ``RewardRecord.error`` with the reason and counted by :func:`~.score.reward_metrics`, never a 0:
``reward/errors/task_reward`` for an exception, another value, a function that cannot be sent to the helper or
a helper that died; ``reward/errors/task_reward_timeout`` for a call past its deadline.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cloudpickle

from metaagent.domain import FILE_MODULE_PREFIX, REWARDS, RewardFn, Verdict, extend_path
from metaagent.execution.process import WALL_FACTOR
from metaagent.execution.worker_pool import WorkerPool, helper_count, shared_pool
from metaagent.lazy import import_file

from .errors import CheckTimeout, ExecutionError, RewardError

#: CPU seconds one call of a registered reward may take (``reward.task_reward_timeout_s``; wall clock 3x)
DEFAULT_TIMEOUT_S = 10.0
#: the error kinds (``reward/errors/<kind>``): the function failed; it missed its deadline
ERROR_KIND, TIMEOUT_KIND = "task_reward", "task_reward_timeout"

REWARD_WORKERS = helper_count("METAAGENT_REWARD_WORKERS")
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding the metaagent package
#: run with the package importable whatever the environment; its own script folder is not put on sys.path,
#: where this package's ``math.py`` and ``numbers.py`` would shadow the standard library's
_ARGV = [
    sys.executable,
    "-c",
    f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); "
    "from metaagent.rewards._reward_worker import main; main()",
]


def _pool() -> WorkerPool:
    return shared_pool("task-reward", _ARGV, REWARD_WORKERS)


def reward_name(fn: Any) -> str:
    """``module:qualname`` of ``fn``, as records and messages name it."""
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', fn)}"


def _pickled(obj: Any) -> str:
    return base64.b64encode(cloudpickle.dumps(obj)).decode("ascii")


def _file_modules() -> dict[str, str]:
    """The reward modules this process imported from ``.py`` files: module name -> file (a file removed since
    is left out: no other process could import it, and its functions were pickled by value or not used)."""
    return {
        name: module.__file__
        for name, module in list(sys.modules.items())
        if name.startswith(FILE_MODULE_PREFIX) and os.path.isfile(getattr(module, "__file__", None) or "")
    }


def _search_path() -> list[str]:
    """This process's ``sys.path``, each entry absolute (the working directory for an empty one)."""
    return [os.path.abspath(p) if p else os.getcwd() for p in sys.path if isinstance(p, str)]


def _request(fn: RewardFn, task: Any, answer: str) -> dict[str, Any]:
    call = _pickled((task, answer))
    return {"fn": _pickled(fn), "call": call, "path": _search_path(), "files": _file_modules()}


def reward_bundle() -> dict[str, Any] | None:
    """The task rewards registered in this process (``REWARDS``) packed for another process that scores
    executions (:func:`load_rewards` there); None when none is registered. ``key`` changes with what is
    packed, so the receiver unpacks a bundle once. A function that cannot be pickled is a
    :class:`RewardError` naming it: left out, it would silently give way to the domain's scorer there."""
    table = REWARDS.registered()
    if not table:
        return None
    rewards = {}
    for domain, fn in sorted(table.items()):
        try:
            rewards[domain] = _pickled(fn)
        except Exception as e:  # noqa: BLE001 - what the user's function refers to decides whether it pickles
            raise RewardError(
                f"reward {reward_name(fn)} of {domain} cannot be sent to the processes that score executions "
                f"({type(e).__name__}: {e}); define it at module level of an importable module or of a .py "
                "file named in data.rewards"
            ) from None
    files = {}  # the .py files the registered functions come from (not every file an earlier run imported)
    wanted = {getattr(fn, "__module__", None) for fn in table.values()}
    for name, path in sorted(_file_modules().items()):
        if name not in wanted:
            continue
        text = _source(path)
        if text is not None:
            files[name] = {"path": path, "source": text}
    key = hashlib.sha1(json.dumps([rewards, files], sort_keys=True).encode()).hexdigest()
    return {"key": key, "rewards": rewards, "path": _search_path(), "files": files}


def _source(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def load_rewards(bundle: Mapping[str, Any]) -> dict[str, RewardFn]:
    """The rewards of a :func:`reward_bundle` from another process, by domain: ``sys.path`` extended with its
    entries, each reward module of a ``.py`` file imported under the sender's module name (from the same path
    where that file has the same source, else from a copy of the source), then each function unpickled. What
    cannot be loaded is a :class:`RewardError` naming the domain and how to fix it."""
    extend_path(bundle.get("path", ()))
    for name, file in bundle.get("files", {}).items():
        try:
            _import_reward_file(name, file["path"], file["source"])
        except Exception as e:  # noqa: BLE001 - the user's module (raising on import): one line
            raise _unloadable(f"the reward module {file['path']}", e) from None
    loaded: dict[str, RewardFn] = {}
    for domain, pickled in bundle["rewards"].items():
        try:
            loaded[domain] = cloudpickle.loads(base64.b64decode(pickled))
        except Exception as e:  # noqa: BLE001 - its module is missing here, or raises on import: one line
            raise _unloadable(f"the reward of {domain}", e) from None
    return loaded


def _unloadable(what: str, e: Exception) -> RewardError:
    return RewardError(
        f"{what}, registered where the run started, cannot be loaded in this process "
        f"({type(e).__name__}: {e}); make its module importable here (the same checkout and environment on "
        "every node) or name it as a .py file in data.rewards"
    )


def _import_reward_file(name: str, path: str, source: str) -> None:
    """The reward module ``name`` imported from ``path``, or, where that file is missing or differs from
    ``source``, from a copy of ``source`` in this process's own temporary folder (:func:`_copies`)."""
    if name in sys.modules:
        return
    if _source(path) == source:
        import_file(path, name)
        return
    copy = _copies() / name / Path(path).name  # the file's own name: what its messages and tracebacks show
    copy.parent.mkdir(exist_ok=True)
    copy.write_text(source, encoding="utf-8")
    import_file(copy, name)


@functools.cache
def _copies() -> Path:
    """A folder of this process's (made once, readable by its user only) for the reward files it copies."""
    return Path(tempfile.mkdtemp(prefix="metaagent-rewards-"))


def task_reward_verdict(
    domain: str, fn: RewardFn, task: Any, answer: str | None, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Verdict:
    """``fn(task, answer)`` run in a reward helper process under ``timeout_s`` CPU seconds, as a
    :class:`~metaagent.domain.Verdict` (module docstring): a number in [0, 1] is R_correct; anything else is
    an error of kind ``task_reward`` or ``task_reward_timeout`` whose message says why, never a 0."""
    name = reward_name(fn)
    record: dict[str, Any] = {"fn": name}
    details: dict[str, Any] = {"task_reward": record}

    def error(kind: str, message: str) -> Verdict:
        record["status"] = "timeout" if kind == TIMEOUT_KIND else "error"
        return Verdict(None, details, (), kind, message)

    try:
        request = _request(fn, task, answer or "")
    except Exception as e:  # noqa: BLE001 - what the user's function refers to decides whether it pickles
        return error(ERROR_KIND, f"reward {name} of {domain} cannot be sent to its helper process "
                     f"({type(e).__name__}: {e}); define it at module level of an importable module or of "
                     "a .py file named in data.rewards")  # fmt: skip
    start = time.monotonic()
    try:
        reply = _pool().call(request, timeout_s)
    except CheckTimeout:
        record["elapsed_s"] = round(time.monotonic() - start, 3)
        return error(TIMEOUT_KIND, f"reward {name} of {domain} did not finish within {timeout_s:g} CPU seconds "
                     f"(reward.task_reward_timeout_s; the wall clock allows {WALL_FACTOR:g}x); its helper "
                     "process was killed")  # fmt: skip
    except (ExecutionError, OSError) as e:  # the helper could not start, or died during the call
        return error(ERROR_KIND, f"reward {name} of {domain}: its helper process failed ({e})")
    record["elapsed_s"] = round(time.monotonic() - start, 3)  # the call's wall clock, a helper's start included
    if not reply.get("ok"):
        if reply.get("load"):
            where = "could not be loaded in its helper process:"
            return error(ERROR_KIND, f"reward {name} of {domain} {where} {reply.get('error')}")
        return error(ERROR_KIND, f"reward {name} of {domain} raised {reply.get('error')}")
    if "value" not in reply:
        return error(ERROR_KIND, f"reward {name} returned {reply['invalid']}; it must be a number in [0, 1]")
    value = float(reply["value"])
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        return error(ERROR_KIND, f"reward {name} returned {value!r}; it must be a number in [0, 1]")
    record.update(status="ok", value=value)
    return Verdict(value, details)
