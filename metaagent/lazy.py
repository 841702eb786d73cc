"""Loading code on demand: lazy package exports (PEP 562), so ``import metaagent.replay`` stays cheap,
:func:`import_file`, the one loader of a module from a file path (a script's sibling, a test helper, a user's
``.py`` reward), so no code edits ``sys.path`` to reach a file, and :func:`after_import`, a patch of a heavy
module applied when something imports it, not by importing it."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
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


def import_file(path: str | os.PathLike[str], name: str) -> ModuleType:
    """The Python file ``path`` imported as the module ``name``, once: ``sys.modules[name]`` holds it from
    before its code runs (a dataclass looks its module up while the class is made) and a later call returns
    it; if the code raises, the entry is removed again. A missing file, or ``name`` already taken by another
    file's module, is an ``ImportError`` of one line naming both."""
    file = Path(path).resolve()
    loaded = sys.modules.get(name)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        if where and Path(where).resolve() == file:
            return loaded
        raise ImportError(f"cannot import {file} as {name!r}: that name is already the module from {where}")
    if not file.is_file():
        raise ImportError(f"no file {file} (to import as {name!r})")
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {name!r}: {file} is not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def after_import(name: str, patch: Callable[[ModuleType], None]) -> None:
    """Run ``patch(module)`` on the module ``name`` once it is imported: now if it is, else right after its code
    runs on its first import (a finder at the front of ``sys.meta_path`` that removes itself on that import),
    so a patch of a heavy module does not load it in a process that never uses it."""
    if name in sys.modules:
        patch(sys.modules[name])
        return
    sys.meta_path.insert(0, _AfterImport(name, patch))


class _AfterImport(importlib.abc.MetaPathFinder):
    """The finder of :func:`after_import`: finds ``name`` with the other finders and wraps its loader's
    ``exec_module`` to run ``patch`` after the module's code."""

    def __init__(self, name: str, patch: Callable[[ModuleType], None]) -> None:
        self.name, self.patch = name, patch

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run, patch = spec.loader.exec_module, self.patch

        def exec_module(module: ModuleType) -> None:
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec
