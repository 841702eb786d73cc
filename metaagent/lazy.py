"""Lazy package exports (PEP 562): a package names what it exports and from which of its modules, and a
module is imported only when one of its names is first used, so ``import metaagent.replay`` stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str], namespace: dict[str, Any]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package`` whose public names live in its submodules.

    ``exports`` maps a name to the submodule (relative to ``package``) that defines it; ``namespace`` is the
    package's ``globals()``, where a loaded name is cached so the lookup runs once.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
