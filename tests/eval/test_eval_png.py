"""palette_png: committed curves as 256-colour PNGs, the colours kept, smaller than matplotlib's own."""

from __future__ import annotations

import io

from matplotlib.figure import Figure
from PIL import Image

from metaagent.eval.html import palette_png

LINE = (37, 99, 235)  # "#2563eb", the executor's line colour of the replay plots


def line_plot() -> Figure:
    fig = Figure(figsize=(6, 3))
    ax = fig.add_subplot(1, 1, 1)
    for k in range(6):
        ax.plot(range(40), [(i * (k + 1)) % 7 for i in range(40)], marker="o", ms=3, label=f"series {k}")
    ax.plot(range(40), [3.5] * 40, color="#2563eb", lw=3)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig


def test_palette_png_is_a_smaller_256_colour_copy_that_keeps_the_colours():
    fig = line_plot()
    rgba = io.BytesIO()
    fig.savefig(rgba, format="png", dpi=100)
    small = palette_png(fig, dpi=100)

    image = Image.open(io.BytesIO(small))
    assert image.format == "PNG" and image.mode == "P" and image.size == (600, 300)
    assert len(small) < 0.6 * len(rgba.getvalue())
    colours = {rgb for _, rgb in image.convert("RGB").getcolors(maxcolors=256)}
    assert min(sum((a - b) ** 2 for a, b in zip(rgb, LINE)) for rgb in colours) <= 3 * 4**2  # the line's blue
    assert (255, 255, 255) in colours  # the background stays white
