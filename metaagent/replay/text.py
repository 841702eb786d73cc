"""Small text helpers shared by the console and HTML renderers: folding long texts, formatting numbers."""

from __future__ import annotations

from typing import Any

#: a folded text keeps at most this many lines and characters
FOLD_LINES = 12
FOLD_CHARS = 1200


def fold(
    text: str | None, full: bool = False, lines: int = FOLD_LINES, chars: int = FOLD_CHARS
) -> tuple[str, int]:
    """``text`` cut to ``lines`` lines and ``chars`` characters unless ``full``; returns (text, chars hidden)."""
    if text is None:
        return "", 0
    if full:
        return text, 0
    kept = "\n".join(text.split("\n")[:lines])[:chars]
    return kept, len(text) - len(kept)


def fold_note(hidden: int, flag: str = "--full") -> str:
    return f"… {hidden} more characters ({flag} to expand)" if hidden else ""


def one_line(text: Any, width: int = 60) -> str:
    """A value on one line, cut to ``width`` characters (None as an em dash)."""
    if text is None:
        return "—"
    s = " ".join(str(text).split())
    return s if len(s) <= width else s[: width - 1] + "…"


def num(x: Any, digits: int = 3) -> str:
    """A number for a table: None as an em dash, floats rounded."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def reward_terms(reward: Any) -> str:
    """The terms of a computed reward, ``correct 0.000 + 0.4 × format 0.667`` (``RewardRecord.total =
    correct + lam * format``, plus ``components["overlong"]`` when the overlong penalty applied). The record
    keeps no ``lam``: it is read back as ``lam = (total - correct - overlong) / format``, and left out
    (``+ format 0.000``) when the format score is 0 and the weight cannot be read."""
    overlong = float(reward.components.get("overlong", 0.0))
    correct, fmt = reward.correct or 0.0, reward.format or 0.0
    text = f"correct {num(reward.correct)} + "
    if fmt:
        lam = (reward.total - correct - overlong) / fmt
        text += f"{lam:.3g} × format {num(reward.format)}"
    else:
        text += f"format {num(reward.format)}"
    return text + (f" {'-' if overlong < 0 else '+'} overlong {num(abs(overlong))}" if overlong else "")


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def reference_text(task: dict[str, Any]) -> str:
    """What an answer is checked against: the gold answer, or a summary of the tests of a code task."""
    if task.get("answer") is not None:
        return str(task["answer"])
    tests = task.get("tests")
    if isinstance(tests, dict):
        inputs = tests.get("inputs") or []
        fn = tests.get("fn_name")
        return f"{len(inputs)} hidden tests" + (f" of {fn}()" if fn else " (stdin/stdout)")
    if isinstance(tests, list):
        return f"{len(tests)} hidden tests"
    return "no reference"


def control_rows(tree: Any) -> list[tuple[int, int, float | None, float | None, float | None]]:
    """Per design of a tree with a control: ``(design index, budget k, control reward C(k), design reward
    Rbar, Rbar - C(k))`` (:func:`metaagent.credit.control_baselines`; None where a reward could not be
    computed). The console and HTML replays show these rows."""
    from metaagent.credit import control_baselines, design_reward, design_row

    out = []
    for i, (d, (k, c)) in enumerate(zip(tree.designs, control_baselines(tree))):
        r = design_reward(design_row(tree, i))
        out.append((d.index, k, c, r, None if r is None or c is None else round(r - c, 12)))
    return out
