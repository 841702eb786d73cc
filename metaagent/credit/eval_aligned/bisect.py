"""First-error localisation by bisection (evaluation-aligned credit, seed 002 §3.5, Eq. 8): pure search.

``t* = min{t in 1..T : J_Omega(H_t) = ERR}`` assuming the prefix judge is monotone. The procedure is fixed
exactly (tests count its queries): ``lo = 0`` (the empty prefix, OK by assumption, never asked),
``hi = T`` (the failed full trace, ERR, never asked); while ``hi - lo > 1``: ``mid = (lo + hi) // 2``, ask
``J(H_mid)``, ``hi = mid`` on ERR else ``lo = mid``; return ``hi``. So T = 1 costs no query and T >= 2
costs between ``floor(log2 T)`` and ``ceil(log2 T)``. With a non-monotone judge it returns the boundary
this path finds (an ``OK -> ERR`` step between two asked prefixes), not necessarily the first ERR.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..groups import CreditError

OK = "OK"
ERR = "ERR"


@dataclass
class Bisection:
    """``turn`` = t* (1-based) or None when a query could not be answered (``failed`` says which)."""

    turn: int | None
    queries: list[dict[str, Any]] = field(default_factory=list)  # [{"turn": t, "verdict": "OK" | "ERR"}]
    failed: str | None = None


def first_error_labels(t_star: int) -> list[float]:
    """Eq. 9's helpfulness labels of a failed trace, by turn in call order: ``q = 1`` for the turns before the
    first error ``t*`` (1-based), ``q = 0`` at ``t*``; the turns after it get none (the paper labels only
    "when available")."""
    if not isinstance(t_star, int) or t_star < 1:
        raise CreditError(f"the first error t* is a turn >= 1, got {t_star!r}")
    return [1.0] * (t_star - 1) + [0.0]


def max_queries(T: int) -> int:
    """The most judge queries :func:`first_error` asks for a trace of ``T`` turns: ``ceil(log2 T)``."""
    return 0 if T <= 1 else math.ceil(math.log2(T))


def first_error(T: int, judge: Callable[[int], str | None]) -> Bisection:
    """Bisect ``T`` turns with ``judge(t) -> "OK" | "ERR" | None`` (None: the judge could not answer; the
    search stops and ``failed`` says where)."""
    if not isinstance(T, int) or T < 1:
        raise CreditError(f"first-error bisection needs T >= 1 turns, got {T!r}")
    lo, hi = 0, T
    out = Bisection(None)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        verdict = judge(mid)
        if verdict is None:
            out.failed = f"prefix judge gave no verdict for H_{mid}"
            return out
        if verdict not in (OK, ERR):
            raise CreditError(f"a prefix judge answers 'OK' or 'ERR' (or None), got {verdict!r}")
        out.queries.append({"turn": mid, "verdict": verdict})
        if verdict == ERR:
            hi = mid
        else:
            lo = mid
    out.turn = hi
    return out
