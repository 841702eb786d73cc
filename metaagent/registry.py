"""Named registries, one shape for every extension table of the project (credit estimators and their token
stages, turn rewards, reward allocators, policy losses, workflow template banks, training backends, ...),
like verl's ``register_adv_est`` / ``get_adv_estimator_fn``.

An entry comes from one of three places, looked up in this order:

1. ``@registry.register(name)`` in code that has run (the built-ins of a module once it is imported);
2. ``registry.register_lazy(name, "module:attr")``: a built-in whose module is imported only when the name is
   first used (a training backend that would bring in torch or verl), written like an entry point;
3. a plugin: an installed distribution's entry point in the registry's ``group``, e.g. in its pyproject::

       [project.entry-points."metaagent.estimators"]
       my_estimator = "my_package.credit:my_estimator"

   loaded on the first lookup of its name that the first two miss (nothing is imported before), and
   registered under the entry point's name.

:meth:`Registry.names` and ``in`` see all three without importing anything. A function's options are its
keyword-only parameters; :meth:`Registry.check_options` refuses an unknown option by name before anything
runs. Each registry raises its own room's error type.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata
from typing import Any, Generic, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: the prefix of every registry's entry-point group ("metaagent.<table>")
GROUP_PREFIX = "metaagent."


#: the installed entry points of every group, read once per import path (``tuple(sys.path)``): reading the
#: installed distributions' metadata takes about 0.1 s, and a lookup that misses a table asks for them
_INSTALLED: dict[tuple[str, ...], dict[str, dict[str, metadata.EntryPoint]]] = {}


def entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    """The installed entry points of ``group`` by name (the first distribution's wins a duplicate name). The
    metadata is read once for the current ``sys.path``; a distribution installed into a folder already read
    is seen by the next process (or after ``sys.path`` changes)."""
    key = tuple(sys.path)
    groups = _INSTALLED.get(key)
    if groups is None:
        groups = {}
        seen: set[str] = set()
        for dist in metadata.distributions():  # as metadata.entry_points(): the first distribution of a name
            name = getattr(dist, "_normalized_name", None) or dist.metadata["Name"]
            if name in seen:
                continue
            seen.add(name)
            for ep in dist.entry_points:
                groups.setdefault(ep.group, {}).setdefault(ep.name, ep)
        _INSTALLED[key] = groups
    return dict(groups.get(group, {}))


def load_spec(spec: str) -> Any:
    """The object a ``module:attr`` (or ``module:attr.sub``) spec names, imported now."""
    module, _, attr = spec.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


class Registry(Generic[F]):
    """``kind`` names the entries in messages ("credit estimator"); ``error`` is the exception raised;
    ``group`` is the entry-point group of plugins (``"metaagent.<table>"``; None: no plugins)."""

    def __init__(self, kind: str, error: type[Exception], *, group: str | None = None) -> None:
        if group is not None and not group.startswith(GROUP_PREFIX):
            raise ValueError(f"entry-point group {group!r} of the {kind} registry must start with {GROUP_PREFIX!r}")
        self.kind = kind
        self.error = error
        self.group = group
        self._table: dict[str, F] = {}
        self._lazy: dict[str, str] = {}
        self._lock = threading.RLock()

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: register ``fn`` under ``name``. Registering a different function twice is an error."""
        self._check_name(name)

        def decorator(fn: F) -> F:
            with self._lock:
                old = self._table.get(name)
                if old is not None and old is not fn:
                    where = f"{getattr(old, '__module__', '?')}.{getattr(old, '__qualname__', old)}"
                    raise self.error(f"{self.kind} {name!r} is already registered ({where})")
                self._table[name] = fn
            return fn

        return decorator

    def register_lazy(self, name: str, spec: str) -> None:
        """Register ``name`` as the object ``spec`` (``"module:attr"``) names, imported at its first use."""
        self._check_name(name)
        if ":" not in spec:
            raise self.error(f"{self.kind} {name!r}: spec {spec!r} must look like module:attr")
        with self._lock:
            if name in self._table or self._lazy.get(name, spec) != spec:
                raise self.error(f"{self.kind} {name!r} is already registered")
            self._lazy[name] = spec

    def get(self, name: str) -> F:
        """The entry registered as ``name`` (a lazy built-in or a plugin is loaded now); the error lists the
        known names."""
        try:
            return self._table[name]
        except (KeyError, TypeError):
            pass
        found = self._load(name) if isinstance(name, str) else None
        if found is None:
            raise self.error(f"unknown {self.kind} {name!r}; known: {self.names()}") from None
        return found

    def loaded(self, name: str) -> F | None:
        """The entry registered as ``name`` by code that has run, or None; nothing is imported (a lazy
        built-in or a plugin not looked up yet is None)."""
        return self._table.get(name) if isinstance(name, str) else None

    def find(self, name: str) -> F | None:
        """The entry registered as ``name``, or None (a lazy built-in or a plugin is loaded now)."""
        return self.get(name) if name in self else None

    def registered(self) -> dict[str, F]:
        """A copy of the entries registered in code so far, by name, without the lazy built-ins and the
        plugins not yet loaded (another process finds those itself): what only this process knows."""
        with self._lock:
            return dict(self._table)

    def names(self) -> list[str]:
        """Every name: registered, lazy and installed plugins (none imported)."""
        with self._lock:
            known = set(self._table) | set(self._lazy)
        return sorted(known | set(self._plugins()))

    def options(self, name: str) -> dict[str, Any]:
        """Keyword-only options of ``name`` with their defaults (for config validation and --help)."""
        sig = inspect.signature(self.get(name))
        return {p.name: p.default for p in sig.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}

    def check_options(self, name: str, options: Mapping[str, Any]) -> None:
        """Raise naming the unknown option(s) of ``name`` and the allowed ones, before running it."""
        allowed = self.options(name)
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise self.error(f"{self.kind} {name!r} has no option(s) {unknown}; allowed: {sorted(allowed)}")

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        return name in self._table or name in self._lazy or name in self._plugins()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    # ---- loading -------------------------------------------------------------------------------------------

    def _check_name(self, name: object) -> None:
        if not isinstance(name, str) or not name:
            raise self.error(f"{self.kind} name must be a non-empty string, got {name!r}")

    def _plugins(self) -> dict[str, metadata.EntryPoint]:
        return entry_points(self.group) if self.group is not None else {}

    def _load(self, name: str) -> F | None:
        """Load ``name`` from its lazy spec or its plugin's entry point and register it; None when neither
        exists."""
        with self._lock:
            if name in self._table:  # another thread loaded it meanwhile
                return self._table[name]
            spec = self._lazy.get(name)
            ep = None if spec is not None else self._plugins().get(name)
            if spec is None and ep is None:
                return None
            where = f"{spec}" if spec is not None else f"entry point {ep.value} of group {self.group}"
            try:
                obj = load_spec(spec) if spec is not None else ep.load()
            except Exception as e:  # noqa: BLE001 - the plugin's code (a missing module, a syntax error): one line
                raise self.error(f"cannot load {self.kind} {name!r} from {where}: {type(e).__name__}: {e}") from e
            self._lazy.pop(name, None)
            if name not in self._table:  # importing the module may have registered it under its name already
                self.register(name)(obj)
            return self._table[name]
