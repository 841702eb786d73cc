"""Named registries of pure functions (credit estimators, turn rewards, reward allocators), one shape for
all, like verl's ``register_adv_est`` / ``get_adv_estimator_fn``.

A function's options are its keyword-only parameters; :meth:`Registry.check_options` refuses an unknown
option by name before anything runs. Each registry raises its own room's error type.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Registry(Generic[F]):
    """``kind`` names the entries in messages ("credit estimator"); ``error`` is the exception raised."""

    def __init__(self, kind: str, error: type[Exception]) -> None:
        self.kind = kind
        self.error = error
        self._table: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: register ``fn`` under ``name``. Registering a different function twice is an error."""
        if not isinstance(name, str) or not name:
            raise self.error(f"{self.kind} name must be a non-empty string, got {name!r}")

        def decorator(fn: F) -> F:
            old = self._table.get(name)
            if old is not None and old is not fn:
                what = getattr(old, "__qualname__", None) or type(old).__name__  # a function, a class or a record
                raise self.error(f"{self.kind} {name!r} is already registered ({old.__module__}.{what})")
            self._table[name] = fn
            return fn

        return decorator

    def get(self, name: str) -> F:
        """The function registered as ``name``; the error lists the known names."""
        try:
            return self._table[name]
        except (KeyError, TypeError):
            raise self.error(f"unknown {self.kind} {name!r}; known: {self.names()}") from None

    def names(self) -> list[str]:
        return sorted(self._table)

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
        return name in self._table

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
