"""Registry of credit estimators by name (like verl's ``register_adv_est`` / ``get_adv_estimator_fn``).

Every estimator has one signature, over the rollout records only::

    estimator(trees: Sequence[RolloutTree], **options) -> list[TreeCredit]   # one TreeCredit per tree

It must not modify the trees: :func:`metaagent.credit.assign_credit` writes the advantages and computes
the metrics. Taking all trees of the batch (not one) leaves room for batch-level baselines; returning
:class:`~metaagent.credit.records.TreeCredit` (designer, executor and optional per-turn advantages) leaves
room for per-(agent, turn) groups (AT-GRPO), judge process rewards (MAPPA) and Shapley credit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from metaagent.registry import Registry

from .groups import CreditError

Estimator = Callable[..., list[Any]]

_ESTIMATORS: Registry[Estimator] = Registry("credit estimator", CreditError)

register_estimator = _ESTIMATORS.register
get_estimator = _ESTIMATORS.get
list_estimators = _ESTIMATORS.names
estimator_options = _ESTIMATORS.options
check_options = _ESTIMATORS.check_options


# ---- token stages: per-token advantages computed in the trainer ---------------------------------------------
#
# Some estimators need model outputs the records do not hold (MAPPA's KL-in-reward needs log pi_ref of every
# action token). Such an estimator registers a *token stage* under its own name: after the samples are built
# (and, when ``needs_ref(options)``, after a reference-model pass over the whole batch), the trainer calls
#
#     stage(actions: Sequence[Action], **options) -> list[np.ndarray]     # one (L,) array per action
#
# and uses the arrays as the samples' per-token advantages.


class TokenStage:
    """A registered token stage: ``fn`` and whether it needs reference log-probs for given options."""

    def __init__(self, name: str, fn: Callable[..., list[Any]], needs_ref: Callable[[dict[str, Any]], bool]) -> None:
        self.name = name
        self.fn = fn
        self.needs_ref = needs_ref

    def __call__(self, actions: Any, **options: Any) -> list[Any]:
        return self.fn(actions, **options)


_TOKEN_STAGES: dict[str, TokenStage] = {}


def register_token_stage(
    name: str, fn: Callable[..., list[Any]], *, needs_ref: Callable[[dict[str, Any]], bool] = lambda options: False
) -> None:
    """Declare that estimator ``name`` finishes its advantages per token in the trainer with ``fn``."""
    old = _TOKEN_STAGES.get(name)
    if old is not None and old.fn is not fn:
        raise CreditError(f"token stage {name!r} is already registered ({old.fn.__module__}.{old.fn.__name__})")
    _TOKEN_STAGES[name] = TokenStage(name, fn, needs_ref)


def get_token_stage(name: str) -> TokenStage | None:
    """The token stage of estimator ``name``, or None when its advantages are final after credit."""
    return _TOKEN_STAGES.get(name)
