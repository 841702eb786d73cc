"""What the training loop needs of a backend: the models, served for the rollout and trained on samples.

:class:`metaagent.train.loop.TrainLoop` owns the schedule, the data, the rollout, credit, samples and the run
directory; a backend owns the physical models. Backends are chosen by name (``trainer.backend``) from
:data:`BACKENDS`, a :class:`metaagent.registry.Registry`: ``local``
(:class:`metaagent.train.local.LocalBackend`: one process, CPU or one GPU) and ``verl``
(:class:`metaagent.train.verl_backend.backend.VerlBackend`: verl worker groups, GPUs or CPU workers), each
imported only when it is used; a plugin's backend is an entry point of the group ``metaagent.backends``.
:func:`make_backend` builds the configured one; ``TrainLoop(config)`` does it itself.

Each derives from :class:`Backend` and declares its :class:`Capabilities`; the methods of a capability it
lacks keep the base class's defaults, which refuse in one line (the loop checks the capabilities first).
The loop calls, in this order::

    backend.start(needs)                       load / start the models (after the run directory is ready)
    backend.restore(checkpoint) -> state       --resume: models, optimizers; the loop's own state back
    backend.policies(start_step)               the rollout's designer and executor policies
    each step:  [ref_logprobs(samples), values(samples)]   the token stage's pre-passes (when it needs them)
                check_samples(trees, samples, options)     the backend's consistency metrics
                [reset_optimizer_moments()]                optim.stage_switch=reset at a stage boundary
                update(samples, step, active, pairs)       Eq. 2-3: one optimizer step per model
    backend.save(run_dir, next_step, state=..., designer_prompt=...)
    backend.close()
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from metaagent.config import ConfigError
from metaagent.errors import MetaAgentError
from metaagent.policy.base import Policy
from metaagent.records import RolloutTree
from metaagent.registry import Registry


@dataclass(frozen=True)
class Capabilities:
    """What a backend can train; the loop refuses a configuration that needs more before anything loads."""

    token_advantages: bool = False  # the update trains on Sample.token_advantages (token-stage estimators)
    critic: bool = False  # a value model per model: values() and the critic's update (GAE token stages)
    ref_logprobs: bool = False  # the reference pre-pass of token stages with a KL term in the reward
    reset_moments: bool = False  # optim.stage_switch=reset
    preference_pairs: bool = False  # optim.dpo: the DPO loss on the records' preference pairs


class Needs(NamedTuple):
    """What the loop will ask of the backend this run (from the estimator's token stage)."""

    ref_logprobs: bool = False
    values: bool = False


class Policies(NamedTuple):
    """The rollout's policies: the designer's and the executor's (a router when roles have their own models)."""

    designer: Policy
    executor: Policy


class BackendError(MetaAgentError, RuntimeError):
    """A backend cannot do what it was asked (a capability it lacks); the message says what to change."""


class Backend(abc.ABC):
    """The models of a run (module docstring for the order of calls). A subclass sets ``name`` and
    ``capabilities`` and implements the abstract methods; the others have defaults: ``check_samples``
    reports nothing, ``close`` releases nothing, and the methods of a capability refuse in one line."""

    name: str = ""  # run.json's "backend": its name in BACKENDS
    capabilities: Capabilities = Capabilities()

    @abc.abstractmethod
    def start(self, needs: Needs) -> None:
        """Load or start the models, optimizers and (``needs.values``) critics."""

    @abc.abstractmethod
    def run_info(self) -> dict[str, Any]:
        """The backend's fields of run.json: at least ``models`` (role -> model path)."""

    @abc.abstractmethod
    def restore(self, path: Path) -> dict[str, Any]:
        """Load models and optimizers from checkpoint ``path``; the loop's state saved beside them."""

    @abc.abstractmethod
    def policies(self, step: int) -> Policies:
        """The rollout policies, serving the weights the update of ``step - 1`` left."""

    def ref_logprobs(self, samples: Sequence[Any]) -> list[list[float]]:
        """``log pi_ref`` of every response token of ``samples``, in order (``capabilities.ref_logprobs``)."""
        raise BackendError(
            f"the {self.name} backend has no reference pre-pass (capabilities.ref_logprobs is false)"
        )

    def values(self, samples: Sequence[Any]) -> list[list[float]]:
        """The critic's ``V_t`` of every response token of ``samples``, in order (``capabilities.critic``)."""
        raise BackendError(f"the {self.name} backend trains no critic (capabilities.critic is false)")

    def model_key(self, sample: Any) -> str:
        """The physical model that trains ``sample`` (per-model normalisation of token stages,
        ``capabilities.token_advantages``)."""
        raise BackendError(
            f"the {self.name} backend does not train per-token advantages "
            "(capabilities.token_advantages is false)"
        )

    def check_samples(self, trees: list[RolloutTree], samples: Any, options: dict[str, Any]) -> dict[str, Any]:
        """Consistency metrics of the built samples against the backend's own view of ``trees`` (may be none)."""
        return {}

    def reset_optimizer_moments(self) -> None:
        """Forget the optimizer moments (``capabilities.reset_moments``)."""
        raise BackendError(
            f"the {self.name} backend cannot reset its optimizer moments "
            "(capabilities.reset_moments is false)"
        )

    @abc.abstractmethod
    def update(self, samples: Any, step: int, active: frozenset[str], pairs: Sequence[Any]) -> dict[str, Any]:
        """One optimizer step per physical model with samples (Eq. 2-3); ``pairs`` only with
        ``capabilities.preference_pairs``. Returns ``train/*`` metrics."""

    @abc.abstractmethod
    def save(
        self, run_dir: Path, next_step: int, *, state: dict[str, Any], designer_prompt: str, domain_hint: bool = True
    ) -> Path:
        """Write checkpoint ``next_step`` under ``run_dir`` with the loop's ``state``; its folder. The designer
        prompt it was trained with (``designer_prompt`` style, ``domain_hint``) goes with the models, where
        ``auto`` of eval and serve reads it (``metaagent.rollout.prompts.write_designer_prompt``)."""

    def close(self) -> None:
        """Release the models (and any workers or cluster the backend started)."""


#: training backend name -> its class, built as ``cls(config, **options)``; the built-ins are imported at
#: their first use, plugins are entry points of the group ``metaagent.backends``
BACKENDS: Registry[Callable[..., Backend]] = Registry(
    "training backend", ConfigError, group="metaagent.backends"
)
BACKENDS.register_lazy("local", "metaagent.train.local.backend:LocalBackend")
BACKENDS.register_lazy("verl", "metaagent.train.verl_backend.backend:VerlBackend")
register_backend = BACKENDS.register


def backend_names() -> list[str]:
    """The names ``trainer.backend`` accepts: the built-ins and the installed plugins (none imported)."""
    return BACKENDS.names()


def make_backend(config: Any, **options: Any) -> Backend:
    """The backend ``config.trainer.backend`` names, for ``config`` (``options``: the class's own keywords,
    e.g. the verl backend's ``plan=``). Nothing loads before :meth:`Backend.start`."""
    return BACKENDS.get(config.trainer.backend)(config, **options)
