"""Registry of credit estimators by name (like verl's ``register_adv_est`` / ``get_adv_estimator_fn``).

Every estimator has one signature, over the rollout records only::

    estimator(trees: Sequence[RolloutTree], **options) -> list[TreeCredit]   # one TreeCredit per tree

It must not modify the trees: :func:`metaagent.credit.assign_credit` writes the advantages and computes
the metrics. Taking all trees of the batch (not one) leaves room for batch-level baselines; returning
:class:`~metaagent.credit.records.TreeCredit` (designer, executor and optional per-turn advantages) leaves
room for per-(agent, turn) groups (AT-GRPO), judge process rewards (MAPPA) and Shapley credit.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .groups import CreditError

Estimator = Callable[..., list[Any]]

_ESTIMATORS: dict[str, Estimator] = {}


def register_estimator(name: str) -> Callable[[Estimator], Estimator]:
    """Decorator: register ``fn`` under ``name``. Registering a different function twice is an error."""
    if not isinstance(name, str) or not name:
        raise CreditError(f"estimator name must be a non-empty string, got {name!r}")

    def decorator(fn: Estimator) -> Estimator:
        old = _ESTIMATORS.get(name)
        if old is not None and old is not fn:
            raise CreditError(
                f"credit estimator {name!r} is already registered ({old.__module__}.{old.__name__})"
            )
        _ESTIMATORS[name] = fn
        return fn

    return decorator


def get_estimator(name: str) -> Estimator:
    """The estimator registered as ``name``; the error lists the known names."""
    try:
        return _ESTIMATORS[name]
    except (KeyError, TypeError):
        raise CreditError(f"unknown credit estimator {name!r}; known: {sorted(_ESTIMATORS)}") from None


def list_estimators() -> list[str]:
    return sorted(_ESTIMATORS)


def estimator_options(name: str) -> dict[str, Any]:
    """Keyword options of estimator ``name`` with their defaults (for config validation and --help)."""
    sig = inspect.signature(get_estimator(name))
    return {p.name: p.default for p in sig.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def check_options(name: str, options: dict[str, Any]) -> None:
    """Raise naming the unknown option(s) and the allowed ones, before running the estimator."""
    allowed = estimator_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise CreditError(f"credit estimator {name!r} has no option(s) {unknown}; allowed: {sorted(allowed)}")
