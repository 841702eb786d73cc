"""Self-contained HTML and PNG plot helpers shared by the evaluation report and the replay report.

Everything is inline: CSS in one ``<style>`` block (system fonts only), plots as base64 PNG ``data:``
images (matplotlib's Agg canvas: no display, no global pyplot state), scripts highlighted by pygments with
inline styles; no JavaScript, no external fonts, stylesheets or images.
"""

from __future__ import annotations

import base64
import html
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from PIL import Image
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

FAMILY_COLORS = {"single": "#60a5fa", "reflection": "#34d399", "ensemble": "#f59e0b", "other": "#9ca3af"}
SIZE = (8.0, 3.2)
DPI = 100

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       margin: 24px; color: #111827; background: #ffffff; max-width: 1200px; }
h1 { font-size: 22px; } h2 { font-size: 18px; border-bottom: 1px solid #e5e7eb; padding-bottom: 4px; margin-top: 28px; }
h3 { font-size: 15px; margin-bottom: 6px; }
table { border-collapse: collapse; margin: 8px 0 14px 0; font-size: 13px; }
th, td { border: 1px solid #e5e7eb; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f4f6; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre, code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
pre.text { white-space: pre-wrap; word-break: break-word; background: #f9fafb; padding: 6px; border: 1px solid #e5e7eb; margin: 4px 0; }
details { margin: 4px 0 4px 8px; } summary { cursor: pointer; }
.turn { border-left: 3px solid #3b82f6; padding-left: 8px; margin: 8px 0; }
.tool { border-left: 3px solid #a855f7; padding-left: 8px; margin: 8px 0; }
.bad { color: #b91c1c; } .good { color: #047857; } .warn { color: #b45309; } .dim { color: #6b7280; }
img.plot { max-width: 100%; border: 1px solid #e5e7eb; margin: 6px 0; }
.highlight pre { padding: 6px; border: 1px solid #e5e7eb; overflow-x: auto; }
"""


def escape(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def write_page(out: str | os.PathLike[str], title: str, body: Sequence[str]) -> Path:
    """Write a self-contained HTML page (``title`` escaped here, ``body`` HTML fragments one a line) to ``out``,
    making its folder; returns its path."""
    doc = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{escape(title)}</title>'
        f"<style>{CSS}</style></head><body>" + "\n".join(body) + "</body></html>\n"
    )
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc, encoding="utf-8")
    return path


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def img(png: bytes | None, alt: str) -> str:
    if png is None:
        return f'<p class="dim">{escape(alt)}: no data to plot.</p>'
    return f'<img class="plot" alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def highlight_python(script: str) -> str:
    return highlight(script, PythonLexer(), HtmlFormatter(noclasses=True, linenos="inline"))


def figure(size: tuple[float, float] = SIZE):
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=DPI)
    return fig, fig.add_subplot(1, 1, 1)


def png(fig: Any) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def palette_png(fig: Any, *, dpi: float | None = None) -> bytes:
    """``fig`` as a 256-colour PNG, for committed curves: a line plot loses nothing visible and the file is a
    third of matplotlib's RGBA one (co-evolution v2 seed 1's curves: 304 kB -> 113 kB), which the repository's
    size budgets need (``tests/test_repository.py``)."""
    raw, out = io.BytesIO(), io.BytesIO()
    fig.savefig(raw, format="png", dpi=dpi)
    raw.seek(0)
    image = Image.open(raw).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    image.save(out, "PNG", optimize=True)
    return out.getvalue()


def benchmark_plot(
    shares: Mapping[str, Mapping[str, float]], title: str = "structure share per benchmark"
) -> bytes | None:
    """Stacked horizontal bars: the family share (single / reflection / ensemble / other) per benchmark."""
    benches = list(shares)
    if not benches:
        return None
    labels = list(dict.fromkeys(l for row in shares.values() for l in row))
    if not labels:
        return None
    fig, ax = figure((8.0, 0.5 + 0.45 * len(benches)))
    left = [0.0] * len(benches)
    for label in labels:
        widths = [float(shares[b].get(label, 0.0)) for b in benches]
        ax.barh(benches, widths, left=left, label=label, color=FAMILY_COLORS.get(label))
        for i, w in enumerate(widths):
            if w >= 0.08:
                ax.text(left[i] + w / 2, i, f"{100 * w:.0f}%", ha="center", va="center", fontsize=7)
        left = [a + w for a, w in zip(left, widths)]
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("share of workflows")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return png(fig)
