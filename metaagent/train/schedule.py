"""Which roles' samples enter the loss at each training step (paper §3.3, Eq. 9).

Stagewise co-evolution alternates fixed phases of K steps, executor first (steps count from 0)::

    (alpha_D, alpha_E) = (0, 1)   if floor(t / K) mod 2 == 0     executor stage
                         (1, 0)   if floor(t / K) mod 2 == 1     designer stage

The ablations of §4.3 are the other modes: ``coupled`` (both roles every step), ``designer_only`` and
``executor_only``. ``frozen`` trains no role: the same task stream and seeds with no update at all, the paired
baseline of an experiment (rollouts, rewards and records as in the other modes; checkpoints unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from metaagent.errors import MetaAgentError
from metaagent.records import DESIGNER, EXECUTOR, ROLES

#: mode -> roles active at every step (stagewise alternates and is handled separately)
FIXED_MODES: dict[str, frozenset[str]] = {
    "coupled": frozenset(ROLES),
    "designer_only": frozenset({DESIGNER}),
    "executor_only": frozenset({EXECUTOR}),
    "frozen": frozenset(),
}
MODES = ("stagewise", *FIXED_MODES)
MODE_TEXT = {
    "coupled": "coupled: both roles every step",
    "designer_only": "designer only",
    "executor_only": "executor only",
    "frozen": "frozen: no role trained (the paired baseline)",
}
DEFAULT_STAGE_LEN = 30  # paper §4.1: K = 30


class ScheduleError(MetaAgentError, ValueError):
    """The schedule is misconfigured; the message says what to change."""


@dataclass(frozen=True)
class Stage:
    """A phase of training. ``index`` counts stages from 0; ``name`` is a role or ``"coupled"``."""

    index: int
    name: str
    roles: frozenset[str]


@dataclass(frozen=True)
class StageSchedule:
    """Active roles per step. ``stage_len`` (K) only matters in ``stagewise`` mode."""

    mode: str = "stagewise"
    stage_len: int = DEFAULT_STAGE_LEN

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ScheduleError(f"schedule mode must be one of {MODES}, got {self.mode!r}")
        if isinstance(self.stage_len, bool) or not isinstance(self.stage_len, int) or self.stage_len < 1:
            raise ScheduleError(
                f"stage_len must be a positive integer number of steps (paper: {DEFAULT_STAGE_LEN}), "
                f"got {self.stage_len!r}"
            )

    @staticmethod
    def _check_step(step: int) -> int:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ScheduleError(f"training step must be an integer >= 0 (steps count from 0), got {step!r}")
        return step

    def stage(self, step: int) -> Stage:
        """The stage that training step ``step`` belongs to."""
        step = self._check_step(step)
        if self.mode != "stagewise":
            roles = FIXED_MODES[self.mode]
            return Stage(0, next(iter(roles)) if len(roles) == 1 else self.mode, roles)  # coupled, frozen
        index = step // self.stage_len
        role = EXECUTOR if index % 2 == 0 else DESIGNER  # Eq. 9
        return Stage(index, role, frozenset({role}))

    def active_roles(self, step: int) -> frozenset[str]:
        """Roles whose samples contribute to the gradient at ``step``."""
        return self.stage(step).roles

    def is_active(self, role: str, step: int) -> bool:
        if role not in ROLES:
            raise ScheduleError(f"role must be one of {ROLES}, got {role!r}")
        return role in self.active_roles(step)

    def boundaries(self, n_steps: int) -> list[tuple[int, int, str]]:
        """Stages of the first ``n_steps`` steps as ``(first_step, end_step_exclusive, name)``, for plots."""
        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 0:
            raise ScheduleError(f"n_steps must be an integer >= 0, got {n_steps!r}")
        out: list[tuple[int, int, str]] = []
        step = 0
        while step < n_steps:
            st = self.stage(step)
            end = n_steps if self.mode != "stagewise" else min(n_steps, (st.index + 1) * self.stage_len)
            out.append((step, end, st.name))
            step = end
        return out

    def describe(self, n_steps: int, *, max_stages: int = 4) -> str:
        """One line for logs: the mode, and in ``stagewise`` mode the first stages of Eq. 9 with their steps."""
        if self.mode != "stagewise":
            return MODE_TEXT[self.mode]
        stages = self.boundaries(max(n_steps, 1))
        spans = [f"{a}-{b - 1} {name}" for a, b, name in stages[:max_stages]]
        if len(stages) > max_stages:
            spans.append("...")
        return f"stagewise, K={self.stage_len} (Eq. 9): " + ", ".join(spans)

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (the step itself is the trainer's)."""
        return {"mode": self.mode, "stage_len": self.stage_len}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> StageSchedule:
        unknown = set(state) - {"mode", "stage_len"}
        if unknown:
            raise ScheduleError(f"unknown schedule state key(s) {sorted(unknown)}; expected mode, stage_len")
        return cls(**state)
