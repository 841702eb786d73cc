"""Registry of credit estimators by name (like verl's ``register_adv_est`` / ``get_adv_estimator_fn``), and
of the token stages some of them finish in the trainer: two :class:`metaagent.registry.Registry` tables, whose
plugins are entry points of the groups ``metaagent.estimators`` and ``metaagent.token_stages``.

Every estimator has one signature, over the rollout records only::

    estimator(trees: Sequence[RolloutTree], **options) -> list[TreeCredit]   # one TreeCredit per tree

It must not modify the trees: :func:`metaagent.credit.assign_credit` writes the advantages and computes
the metrics. Taking all trees of the batch (not one) leaves room for batch-level baselines; returning
:class:`~metaagent.credit.assign.TreeCredit` (designer, executor and optional per-turn advantages) leaves
room for per-(agent, turn) groups (AT-GRPO), judge process rewards (MAPPA) and Shapley credit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from metaagent.registry import Registry

from .groups import CreditError

Estimator = Callable[..., list[Any]]

_ESTIMATORS: Registry[Estimator] = Registry("credit estimator", CreditError, group="metaagent.estimators")

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
#     stage(actions: Sequence[Action], **options) -> list[np.ndarray] | TokenCredit  # one (L,) array per action
#
# and uses the arrays as the samples' per-token advantages (a ``TokenCredit`` also carries the critic's value
# targets; such a stage gets the critic's values of every token in ``Action.values``: ``needs_values``).


@dataclass
class TokenCredit:
    """What a token stage may return instead of a plain list of advantages: per action, the (L,) advantages
    and, for a stage with a critic, the (L,) value targets (returns) the critic is trained towards."""

    advantages: list[Any]
    returns: list[Any] | None = None


class TokenStage:
    """A registered token stage: ``fn`` and, for given options, whether it runs at all (``active``), whether it
    needs reference log-probs (``needs_ref``) or critic values (``needs_values``: ``Action.values``), and
    whether truncated completions are dropped before it (``drop_truncated``)."""

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any],
        needs_ref: Callable[[dict[str, Any]], bool],
        *,
        active: Callable[[dict[str, Any]], bool] = lambda options: True,
        needs_values: Callable[[dict[str, Any]], bool] = lambda options: False,
        drop_truncated: bool = True,
    ) -> None:
        self.name = name
        self.fn = fn
        self.needs_ref = needs_ref
        self.active = active
        self.needs_values = needs_values
        self.drop_truncated = drop_truncated

    def __call__(self, actions: Any, **options: Any) -> Any:
        return self.fn(actions, **options)


_TOKEN_STAGES: Registry[TokenStage] = Registry("token stage", CreditError, group="metaagent.token_stages")


def register_token_stage(
    name: str,
    fn: Callable[..., Any],
    *,
    needs_ref: Callable[[dict[str, Any]], bool] = lambda options: False,
    active: Callable[[dict[str, Any]], bool] = lambda options: True,
    needs_values: Callable[[dict[str, Any]], bool] = lambda options: False,
    drop_truncated: bool = True,
) -> None:
    """Declare that estimator ``name`` finishes its advantages per token in the trainer with ``fn`` (for the
    options where ``active`` is true)."""
    old = _TOKEN_STAGES.find(name)
    if old is not None and old.fn is not fn:
        raise CreditError(f"token stage {name!r} is already registered ({old.fn.__module__}.{old.fn.__name__})")
    if old is None:
        stage = TokenStage(name, fn, needs_ref, active=active, needs_values=needs_values, drop_truncated=drop_truncated)
        _TOKEN_STAGES.register(name)(stage)


def get_token_stage(name: str, options: dict[str, Any] | None = None) -> TokenStage | None:
    """The token stage of estimator ``name``, or None when its advantages are final after credit (also when
    ``options`` are given and the stage is not active for them, e.g. ``unity`` outside ``mode: gae``)."""
    stage = _TOKEN_STAGES.find(name)
    if stage is not None and options is not None and not stage.active(dict(options)):
        return None
    return stage
