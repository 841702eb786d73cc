"""What the training loop needs of a backend: the models, served for the rollout and trained on samples.

:class:`metaagent.train.loop.TrainLoop` owns the schedule, the data, the rollout, credit, samples and the run
directory; a backend owns the physical models. Two implement this protocol as peers:
:class:`metaagent.train.local.LocalBackend` (one process, CPU or one GPU) and
:class:`metaagent.train.verl_backend.backend.VerlBackend` (verl worker groups, GPUs or CPU workers).

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

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from metaagent.policy.base import Policy
from metaagent.records import RolloutTree


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


class Backend(Protocol):
    """The models of a run (module docstring for the order of calls)."""

    name: str  # run.json's "backend": "local" | "verl"
    capabilities: Capabilities

    def start(self, needs: Needs) -> None:
        """Load or start the models, optimizers and (``needs.values``) critics."""

    def run_info(self) -> dict[str, Any]:
        """The backend's fields of run.json: at least ``models`` (role -> model path)."""

    def restore(self, path: Path) -> dict[str, Any]:
        """Load models and optimizers from checkpoint ``path``; the loop's state saved beside them."""

    def policies(self, step: int) -> Policies:
        """The rollout policies, serving the weights the update of ``step - 1`` left."""

    def ref_logprobs(self, samples: Sequence[Any]) -> list[list[float]]:
        """``log pi_ref`` of every response token of ``samples``, in order (``capabilities.ref_logprobs``)."""

    def values(self, samples: Sequence[Any]) -> list[list[float]]:
        """The critic's ``V_t`` of every response token of ``samples``, in order (``capabilities.critic``)."""

    def model_key(self, sample: Any) -> str:
        """The physical model that trains ``sample`` (per-model normalisation of token stages)."""

    def check_samples(self, trees: list[RolloutTree], samples: Any, options: dict[str, Any]) -> dict[str, Any]:
        """Consistency metrics of the built samples against the backend's own view of ``trees`` (may be none)."""

    def reset_optimizer_moments(self) -> None:
        """Forget the optimizer moments (``capabilities.reset_moments``)."""

    def update(self, samples: Any, step: int, active: frozenset[str], pairs: Sequence[Any]) -> dict[str, Any]:
        """One optimizer step per physical model with samples (Eq. 2-3); ``pairs`` only with
        ``capabilities.preference_pairs``. Returns ``train/*`` metrics."""

    def save(
        self, run_dir: Path, next_step: int, *, state: dict[str, Any], designer_prompt: str, domain_hint: bool = True
    ) -> Path:
        """Write checkpoint ``next_step`` under ``run_dir`` with the loop's ``state``; its folder. The designer
        prompt it was trained with (``designer_prompt`` style, ``domain_hint``) goes with the models, where
        ``auto`` of eval and serve reads it (``metaagent.rollout.prompts.write_designer_prompt``)."""

    def close(self) -> None:
        """Release the models (and any workers or cluster the backend started)."""
