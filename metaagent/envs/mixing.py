"""Per-agent reward mixing of AT-GRPO (seed 003): one place for the three presets.

- ``alpha`` (main text, Eq. 4; default): ``r = alpha * r_team + m * r_loc``, ``alpha = 1``.
- ``lambda`` (Appendix A.1): ``r = lambda * r_team + (1 - lambda) * m * r_loc`` with the per-task lambda of
  :data:`LAMBDAS`.

``m`` is the appendix's verifiability mask (``components["m"]``, default 1): 0 when the answer could not be
parsed or the local sub-scores not computed, so an unparseable answer earns no local reward (App. A.1.3).
Eq. 4 has no mask; we apply the appendix's in both presets, since ``r_loc`` is not defined without it.
- ``pettingllms`` (the reference code, for reproducing released runs): the env's shaped reward of the
  agent's own moves (``components["shaped"]``); not defined for Sudoku (the code's Sudoku rewards were not
  re-derived here).
"""

from __future__ import annotations

from collections.abc import Mapping

from .base import EnvError

MIX_PRESETS = ("alpha", "lambda", "pettingllms")
LAMBDAS = {"sudoku": 0.6, "planpath": 0.5, "sokoban": 0.4, "math": 0.7}


def mix_reward(components: Mapping[str, float], preset: str, task: str, *, alpha: float = 1.0) -> float:
    """The agent's turn reward from an env's components (``team``, ``loc``, ``shaped``) under ``preset``.

    ``task``: ``sudoku | planpath | sokoban | math`` (selects lambda). ``m`` (default 1) is the
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
        if task not in LAMBDAS:
            raise EnvError(f"no lambda for task {task!r}; known: {sorted(LAMBDAS)}")
        lam = LAMBDAS[task]
        return lam * team + (1 - lam) * local
    if preset == "pettingllms":
        if "shaped" not in components:
            raise EnvError(f"the pettingllms preset is not defined for {task!r} (no shaped reward)")
        return float(components["shaped"])
    raise EnvError(f"unknown reward mixing preset {preset!r}; known: {MIX_PRESETS}")
