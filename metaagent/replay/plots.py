"""Plots of a run as PNG bytes (matplotlib's Agg canvas: no display, no global pyplot state).

- :func:`reward_plot`: reward per role over training steps, with the stages of the schedule shaded
  (``schedule/active`` of ``metrics.jsonl``: executor / designer / both) and the valid-script rate;
- :func:`structure_plot`: share of each structure among valid designs over steps (``rollout/structure/*``);
- :func:`benchmark_plot`: structure family share per benchmark (stacked bars, Tables 6 / 10).

Each returns None when there is nothing to draw.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from metaagent.eval.html import FAMILY_COLORS, SIZE, benchmark_plot  # noqa: F401 - re-exported
from metaagent.eval.html import figure as _figure
from metaagent.eval.html import png as _png

#: metrics.jsonl keys (written by metaagent.rollout.metrics and the trainer)
REWARD_KEYS = {"designer": "rollout/reward/designer", "executor": "rollout/reward/executor"}
VALID_KEY = "rollout/valid_script_rate"
STRUCTURE_PREFIX = "rollout/structure/"
ACTIVE_KEY = "schedule/active"
VAL_PREFIX = "val/"
#: shading of the active role's stages and line colours per role
STAGE_COLORS = {"executor": "#dbeafe", "designer": "#fde6cc", "both": "#e5e7eb"}
ROLE_COLORS = {"designer": "#d97706", "executor": "#2563eb"}


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _series(rows: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for row in rows:
        y = _number(row.get(key))
        if y is not None:
            xs.append(int(row["step"]))
            ys.append(y)
    return xs, ys


def stage_spans(rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, int, str]]:
    """Contiguous runs of steps with the same ``schedule/active`` value: (first step, last step, active)."""
    spans: list[tuple[int, int, str]] = []
    for row in rows:
        active = row.get(ACTIVE_KEY)
        if not isinstance(active, str):
            continue
        step = int(row["step"])
        if spans and spans[-1][2] == active:
            spans[-1] = (spans[-1][0], step, active)
        else:
            spans.append((step, step, active))
    return spans


def _integer_steps(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _shade(ax: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    seen = set()
    for first, last, active in stage_spans(rows):
        label = f"{active} stage" if active not in seen else None
        seen.add(active)
        ax.axvspan(
            first - 0.5,
            last + 0.5,
            color=STAGE_COLORS.get(active, "#f3f4f6"),
            alpha=0.9,
            lw=0,
            label=label,
            zorder=0,
        )


def reward_plot(rows: Sequence[Mapping[str, Any]]) -> bytes | None:
    """Designer and executor reward per step, stages shaded; validation rewards as points."""
    series = {role: _series(rows, key) for role, key in REWARD_KEYS.items()}
    if not any(xs for xs, _ in series.values()):
        return None
    fig, ax = _figure()
    _shade(ax, rows)
    for role, (xs, ys) in series.items():
        if xs:
            ax.plot(xs, ys, marker="o", ms=3, lw=1.5, color=ROLE_COLORS[role], label=f"{role} reward")
    xs, ys = _series(rows, VALID_KEY)
    if xs:
        ax.plot(xs, ys, ls="--", lw=1, color="#6b7280", label="valid-script rate")
    val_keys = sorted({k for row in rows for k in row if k.startswith(VAL_PREFIX) and "reward" in k})[:3]
    for key in val_keys:
        xs, ys = _series(rows, key)
        if xs:
            ax.scatter(xs, ys, marker="D", s=18, zorder=3, label=key)
    ys_all = [y for _, ys in series.values() for y in ys]
    ax.set_ylim(min(0.0, *ys_all) - 0.05, max(1.0, *ys_all) + 0.05)
    _integer_steps(ax)
    ax.set_xlabel("training step")
    ax.set_ylabel("mean reward")
    ax.set_title("reward per role over training (shaded: active role)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return _png(fig)


def structure_plot(rows: Sequence[Mapping[str, Any]]) -> bytes | None:
    """Share of each structure among the step's valid designs (stacked), stages shaded."""
    names = sorted(
        {k[len(STRUCTURE_PREFIX) :] for row in rows for k in row if k.startswith(STRUCTURE_PREFIX)}
    )
    steps = [int(r["step"]) for r in rows if any(k.startswith(STRUCTURE_PREFIX) for k in r)]
    if not names or not steps:
        return None
    by_step = {int(r["step"]): r for r in rows}
    fig, ax = _figure()
    _shade(ax, rows)
    stacks = [[_number(by_step[s].get(STRUCTURE_PREFIX + n)) or 0.0 for s in steps] for n in names]
    ax.stackplot(steps, stacks, labels=names, alpha=0.85, zorder=2)
    ax.set_ylim(0, 1)
    _integer_steps(ax)
    ax.set_xlabel("training step")
    ax.set_ylabel("share of valid designs")
    ax.set_title("structure shares over training")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(fig)
