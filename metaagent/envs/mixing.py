"""Per-agent reward mixing of AT-GRPO (seed 003): one place for the three presets.

- ``alpha`` (main text, Eq. 4; default): ``r = alpha * r_team + m * r_loc``, ``alpha = 1``.
- ``lambda`` (Appendix A.1): ``r = lambda * r_team + (1 - lambda) * m * r_loc`` with the per-task lambda
  (:func:`lambda_of`: an environment's own ``PlanEnv.lam``, else :data:`TASK_LAMBDAS`).

``m`` is the appendix's verifiability mask (``components["m"]``, default 1): 0 when the answer could not be
parsed or the local sub-scores not computed, so an unparseable answer earns no local reward (App. A.1.3).
Eq. 4 has no mask; we apply the appendix's in both presets, since ``r_loc`` is not defined without it.
- ``pettingllms`` (the reference code, for reproducing released runs): the env's shaped reward of the
  agent's own moves (``components["shaped"]``); not defined for Sudoku (the code's Sudoku rewards were not
  re-derived here).
"""

from __future__ import annotations

from collections.abc import Mapping

from .base import ENVS, EnvError

MIX_PRESETS = ("alpha", "lambda", "pettingllms")
TASK_LAMBDAS = {"math": 0.7}  # lambda of the tasks that are no environment (App. A.1.1); envs carry their own


def lambda_of(task: str) -> float:
    """The ``lambda`` preset's weight of ``task``: a registered environment's ``lam``, else
    :data:`TASK_LAMBDAS`; an error naming the known ones otherwise."""
    lam = ENVS.get(task).lam if task in ENVS else TASK_LAMBDAS.get(task)
    if lam is None:
        known = sorted([*TASK_LAMBDAS, *(n for n in ENVS.names() if ENVS.get(n).lam is not None)])
        raise EnvError(f"no lambda for task {task!r}; known: {known}")
    return lam


def mix_reward(components: Mapping[str, float], preset: str, task: str, *, alpha: float = 1.0) -> float:
    """The agent's turn reward from an env's components (``team``, ``loc``, ``shaped``) under ``preset``.

    ``task``: an environment's name or ``math`` (selects lambda, :func:`lambda_of`). ``m`` (default 1) is the
    verifiability mask; a missing ``loc`` also means the local sub-scores were not computable (``m = 0``).
    """
    team = float(components["team"])
    loc = components.get("loc")
    local = 0.0 if loc is None else float(components.get("m", 1.0)) * float(loc)
    if preset == "alpha":
        if loc is None:
            raise EnvError("the alpha preset needs the local reward r_loc")
        return alpha * team + local
    if preset == "lambda":
        lam = lambda_of(task)
        return lam * team + (1 - lam) * local
    if preset == "pettingllms":
        if "shaped" not in components:
            raise EnvError(f"the pettingllms preset is not defined for {task!r} (no shaped reward)")
        return float(components["shaped"])
    raise EnvError(f"unknown reward mixing preset {preset!r}; known: {MIX_PRESETS}")
