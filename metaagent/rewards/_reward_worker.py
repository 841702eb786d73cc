"""Helper process for :mod:`metaagent.rewards.task_reward`: runs registered ``reward(task, answer)`` functions,
one JSON line per request.

Started by that module's worker pool (:mod:`metaagent.execution.worker_pool`); the parent enforces the deadline
by killing this process. The protocol lines travel on copies of the original stdin and stdout: the reward
function's own ``print`` goes to stderr (discarded by the pool) and its stdin is empty, so nothing it does can
corrupt an answer.

Request: ``{"fn": b64, "call": b64, "path": [dir, ...], "files": {module: path}}``: the function and the
``(task, answer)`` pair pickled with cloudpickle (base64), the caller's ``sys.path`` (entries missing here are
appended) and the reward modules the caller loaded from ``.py`` files (:func:`metaagent.domain.import_reward_module`),
imported here from the same files under the caller's module names before the function is unpickled.
Response: ``{"ok": true, "value": float}`` (a real number or a bool, not yet range-checked), ``{"ok": true,
"invalid": repr}`` (any other value), ``{"ok": false, "error": "Type: message"}`` (the function raised) or
``{"ok": false, "load": true, "error": ...}`` (the function or its arguments could not be unpickled here).
"""

from __future__ import annotations

import base64
import hashlib
import json
import numbers
import os
import sys
from typing import Any

MAX_CACHED = 64  # unpickled functions kept by the hash of their pickle (the same bytes are not loaded twice)


def _protocol_streams() -> tuple[Any, Any]:
    """Private copies of stdin/stdout for the protocol; fd 0 becomes /dev/null and fd 1 a copy of stderr."""
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - the process's stdin for its whole life
    sys.stdout = sys.stderr
    return requests, answers


def _load(request: dict, cache: dict[str, Any]) -> tuple[Any, Any, str]:
    import cloudpickle

    from metaagent.domain import extend_path
    from metaagent.lazy import import_file

    extend_path(request.get("path", []))
    for name, path in request.get("files", {}).items():  # under the caller's name: its functions refer to it
        if name not in sys.modules:  # one name, one module: the same file's, or a copy of its source
            import_file(path, name)
    fn_bytes = base64.b64decode(request["fn"])
    key = hashlib.sha1(fn_bytes).hexdigest()
    fn = cache.get(key)
    if fn is None:
        fn = cloudpickle.loads(fn_bytes)
        if len(cache) >= MAX_CACHED:
            cache.clear()
        cache[key] = fn
    task, answer = cloudpickle.loads(base64.b64decode(request["call"]))
    return fn, task, answer


def _answer(request: dict, cache: dict[str, Any]) -> dict:
    try:
        fn, task, answer = _load(request, cache)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which records an error
        return {"ok": False, "load": True, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    try:
        value = fn(task, answer)
    except Exception as e:  # noqa: BLE001 - the user's code: reported, recorded and counted by the parent
        return {"ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    if isinstance(value, numbers.Real):
        try:
            return {"ok": True, "value": float(value)}
        except (OverflowError, ValueError):
            pass
    return {"ok": True, "invalid": repr(value)[:200]}


def main() -> None:
    requests, answers = _protocol_streams()
    cache: dict[str, Any] = {}
    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    for line in requests:
        if not line.strip():
            continue
        try:
            answer = _answer(json.loads(line), cache)
        except BaseException as e:  # noqa: BLE001 - e.g. a SystemExit or KeyboardInterrupt the function raised
            answer = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
