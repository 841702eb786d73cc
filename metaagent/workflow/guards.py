"""The run-time side of the allow-lists: builtins and RestrictedPython guards a script executes with.

RestrictedPython rewrites the script so that every attribute read goes through ``_getattr_``, every
subscript through ``_getitem_``, every loop through ``_getiter_``, every attribute/item write through
``_write_``, every ``x += y`` through ``_inplacevar_``, unpacking through ``_(iter_)unpack_sequence_``, calls
with ``*args``/``**kwargs`` through ``_apply_`` and ``print`` through ``_print_``. This module provides those
names; the script's ``__builtins__`` is a fresh dict holding only :data:`rules.SAFE_BUILTINS` (range capped).
Used inside the sandbox worker only.
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Callable
from typing import Any

from RestrictedPython.Guards import (
    full_write_guard,
    guarded_iter_unpack_sequence,
    guarded_unpack_sequence,
    safer_getattr_raise,
)

from . import rules
from .api import LimitReached

_INPLACE_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "<<=": operator.ilshift,
    ">>=": operator.irshift, "|=": operator.ior, "^=": operator.ixor, "&=": operator.iand,
}  # fmt: skip


class OutputLimit(LimitReached):
    """The script printed more than its output budget."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message, kind="OutputLimit")


def guarded_getattr(obj: Any, name: str, default: Any = None) -> Any:
    """``obj.name`` for allow-listed names only (and never format/introspection, via RestrictedPython)."""
    if type(name) is not str or name not in rules.ALLOWED_ATTRIBUTES:
        hint = rules.ATTRIBUTE_HINTS.get(name, "") if isinstance(name, str) else ""
        raise AttributeError(
            f"attribute '.{name}' is not available in workflow scripts" + (f": {hint}" if hint else "")
        )
    return safer_getattr_raise(obj, name)


def guarded_getitem(obj: Any, key: Any) -> Any:
    return obj[key]


def guarded_getiter(obj: Any) -> Any:
    return iter(obj)


def inplace_var(op: str, target: Any, value: Any) -> Any:
    fn = _INPLACE_OPS.get(op)
    if fn is None:
        raise TypeError(f"operator {op} is not supported")
    return fn(target, value)


def apply(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def capped_range(*args: int) -> range:
    r = range(*args)
    if len(r) > rules.MAX_RANGE:
        raise ValueError(
            f"range() of {len(r)} elements is too large for a workflow script (max {rules.MAX_RANGE})"
        )
    return r


class PrintBudget:
    """Counts what a script prints across all of its functions; raises :class:`OutputLimit` past the cap."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.chars = 0
        self.exceeded = False

    def factory(self, _getattr_: Any = None) -> _Printer:
        return _Printer(self)


class _Printer:
    """What ``print`` becomes in a script (RestrictedPython calls ``_print._call_print``). Output is
    counted and discarded: nobody reads a workflow's stdout; the answer goes through submit()."""

    def __init__(self, budget: PrintBudget) -> None:
        self._budget = budget

    def _call_print(
        self, *objects: Any, sep: str | None = " ", end: str | None = "\n", **kwargs: Any
    ) -> None:
        if kwargs.get("file") is not None:
            raise TypeError("print(file=...) is not available in workflow scripts")
        sep = " " if sep is None else sep
        end = "\n" if end is None else end
        budget = self._budget
        if budget.exceeded:
            raise OutputLimit(f"the script printed more than {budget.max_chars} characters")
        size = len(end)
        for i, obj in enumerate(objects):
            size += len(str(obj)) + (len(sep) if i else 0)
            if budget.chars + size > budget.max_chars:
                break
        budget.chars += size
        if budget.chars > budget.max_chars:
            budget.exceeded = True
            raise OutputLimit(f"the script printed more than {budget.max_chars} characters")

    def __call__(self) -> str:  # the `printed` variable of RestrictedPython
        return ""


def script_builtins() -> dict[str, Any]:
    """A fresh builtins dict with the allow-listed names only."""
    table: dict[str, Any] = {name: getattr(builtins, name) for name in rules.SAFE_BUILTINS}
    table["range"] = capped_range
    for name in rules.SAFE_CONSTANTS + rules.SAFE_EXCEPTIONS:
        table[name] = getattr(builtins, name)
    return table


def script_globals(print_budget: PrintBudget) -> dict[str, Any]:
    """Globals of one execution, before the API objects, the task text and the tools are added."""
    return {
        "__builtins__": script_builtins(),
        "__name__": "workflow",
        "_getattr_": guarded_getattr,
        "_getitem_": guarded_getitem,
        "_getiter_": guarded_getiter,
        "_write_": full_write_guard,
        "_inplacevar_": inplace_var,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_apply_": apply,
        "_print_": print_budget.factory,
    }
