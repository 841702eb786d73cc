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

The verdict: a number in [0, 1] (a bool counts as 0 or 1) is R_correct. Everything else is a reward error,
recorded in ``RewardRecord.error`` with the reason and counted by :func:`~.score.reward_metrics`, never a 0:
``reward/errors/task_reward`` for an exception, another value, a function that cannot be sent to the helper or
a helper that died; ``reward/errors/task_reward_timeout`` for a call past its deadline.
"""

from __future__ import annotations

import base64
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle

from metaagent.domain import FILE_MODULE_PREFIX, RewardFn, Verdict
from metaagent.execution.process import WALL_FACTOR
from metaagent.execution.worker_pool import WorkerPool, helper_count, shared_pool

from .errors import CheckTimeout, ExecutionError

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


def _request(fn: RewardFn, task: Any, answer: str) -> dict[str, Any]:
    files = {
        name: module.__file__
        for name, module in list(sys.modules.items())
        if name.startswith(FILE_MODULE_PREFIX) and getattr(module, "__file__", None)
    }
    path = [os.path.abspath(p) if p else os.getcwd() for p in sys.path if isinstance(p, str)]
    return {
        "fn": base64.b64encode(cloudpickle.dumps(fn)).decode("ascii"),
        "call": base64.b64encode(cloudpickle.dumps((task, answer))).decode("ascii"),
        "path": path,
        "files": files,
    }


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
