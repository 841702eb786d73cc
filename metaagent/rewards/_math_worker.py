"""Helper process for :mod:`metaagent.rewards.math`: parse + verify with math-verify, one JSON line per request.

Run as a script (``python -I _math_worker.py``); it imports nothing from metaagent. math-verify's own
signal-based timeouts are disabled (``parsing_timeout=None``, ``timeout_seconds=None``): the parent enforces
the deadline by killing this process.

Request: ``{"gold": [latex, ...], "pred": [latex, ...], "float_rounding": int, "rel_tol": float}`` where
each list holds alternative spellings (e.g. ``50\\%`` and ``\\frac{50}{100}``); the answer is equal when any
gold alternative matches any prediction alternative.
Response: ``{"ok": true, "equal": bool, "method": str, "gold_parsed": str, "pred_parsed": str}`` (plus
``"pred_non_finite": bool`` after the numeric fallback) or ``{"ok": false, "error": str}`` (e.g. the gold answer
does not parse; ``"resource": true`` when parsing or comparing ran out of memory or recursion).
"""

from __future__ import annotations

import cmath
import json
import logging
import resource
import sys

ADDRESS_SPACE_BYTES = 3 << 30  # a runaway sympy computation fails with MemoryError instead of swapping


def _limit_memory() -> None:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    except (ValueError, OSError):
        pass


def _numeric_value(expr):  # -> complex | None
    """The value of a closed-form number (``Eq(x, value)`` unwrapped), or None when it is not one."""
    import sympy

    if isinstance(expr, sympy.Eq) and isinstance(expr.lhs, sympy.Symbol):
        expr = expr.rhs
    if not isinstance(expr, sympy.Expr) or not expr.is_number:
        return None
    try:
        value = complex(sympy.N(expr, 30))
    except OverflowError:  # a finite sympy number beyond the float range: astronomically large
        return complex(float("inf"))
    except (TypeError, ValueError):
        return None
    return value


def _finite(value: complex) -> bool:
    return cmath.isfinite(value) and abs(value) < 1e300


def _close(gold: complex, pred: complex, rel_tol: float) -> bool:
    """Finite values only, within ``rel_tol`` relative to the reference (not to the larger side: a huge
    prediction must not widen its own tolerance)."""
    if not (_finite(gold) and _finite(pred)):
        return False
    return pred == gold or abs(pred - gold) <= rel_tol * abs(gold)


def _check(request: dict) -> dict:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    configs = [LatexExtractionConfig(), ExprExtractionConfig()]

    def parse_all(alternatives: list[str]) -> list:
        parsed = []
        for text in alternatives:
            parsed.extend(parse("\\boxed{" + text + "}", extraction_config=configs, parsing_timeout=None))
        return parsed

    gold = parse_all(request["gold"])
    if not gold:
        return {"ok": False, "error": f"the gold answer {request['gold'][0]!r} could not be parsed"}
    pred = parse_all(request["pred"])
    shown = {"gold_parsed": str(gold[0])[:200], "pred_parsed": str(pred[0])[:200] if pred else ""}
    if not pred:
        return {"ok": True, "equal": False, "method": "unparsed", **shown}
    if verify(gold, pred, float_rounding=int(request["float_rounding"]), timeout_seconds=None):
        return {"ok": True, "equal": True, "method": "math_verify", **shown}
    rel_tol = float(request["rel_tol"])
    gold_values = [v for v in map(_numeric_value, gold) if v is not None]
    pred_values = [v for v in map(_numeric_value, pred) if v is not None]
    equal = any(_close(g, p, rel_tol) for g in gold_values for p in pred_values)
    non_finite = any(not _finite(p) for p in pred_values)
    return {"ok": True, "equal": equal, "method": "numeric", "pred_non_finite": non_finite, **shown}


def main() -> None:
    _limit_memory()
    logging.disable(logging.CRITICAL)  # math-verify logs a warning for every disabled timeout
    import math_verify  # noqa: F401  (import once before reporting ready)
    import sympy  # noqa: F401

    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = _check(json.loads(line))
        except MemoryError:
            answer = {"ok": False, "resource": True, "error": f"out of memory (limit {ADDRESS_SPACE_BYTES >> 20} MiB)"}
        except RecursionError:
            answer = {"ok": False, "resource": True, "error": "recursion too deep while parsing or comparing"}
        except Exception as e:  # noqa: BLE001 - reported to the parent, which records an error
            answer = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
