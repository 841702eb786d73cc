"""--html: a self-contained report (no network resource), checked as text and rendered in headless Chromium."""

from __future__ import annotations


import pytest
from builders import CHROMIUM_NAMES, chromium, run_chromium
from replay_helpers import embedded_pngs, network_references

from metaagent.replay import render_html
from metaagent.replay.plots import FAMILY_COLORS

#: plot colours that must appear in a rendered report: the benchmark bars of two families present in the run
BAR_COLORS = {
    f: tuple(int(FAMILY_COLORS[f][i : i + 2], 16) for i in (1, 3, 5)) for f in ("single", "reflection")
}


def test_the_detector_finds_network_references():
    assert network_references('<img src="https://x/y.png">') == ["external src/href"]
    assert network_references('<a href="//cdn/x">') == ["external src/href"]
    assert network_references('<script src="a.js"></script>') == ["script file"]
    assert network_references("<style>@import 'x.css';</style>") == ["css import"]
    assert network_references("<style>body{background:url(http://x)}</style>") == ["css url()"]
    assert network_references('<img src="data:image/png;base64,AAAA"><a href="#task-1">') == []


def test_report_of_scripted_runs_is_self_contained_and_escapes_model_text(scripted_runs, tmp_path):
    a, b, expected = scripted_runs
    out = render_html(a, tmp_path / "r" / "report.html", compare_with=b)
    html = out.read_text(encoding="utf-8")
    assert network_references(html) == []
    assert "<script" not in html.lower()
    # agent replies hold <delivery> tags: shown as text, never parsed as markup
    assert "&lt;delivery&gt;" in html and "<delivery>" not in html
    assert "Comparison: A = scripted-A vs B = scripted-B" in html
    for task_id, outcome in expected.items():
        assert f'id="task-{task_id}"' in html
        assert outcome in html
    # no metrics.jsonl: the curves come from the records, and the per-benchmark bars are drawn
    pngs = embedded_pngs(html)
    assert pngs and all(p.startswith(b"\x89PNG\r\n\x1a\n") for p in pngs)


@pytest.mark.slow
def test_report_of_a_tiny_training_run(tiny_runs, tmp_path):
    out = render_html(tiny_runs["a"], tmp_path / "report.html", compare_with=tiny_runs["b"])
    html = out.read_text(encoding="utf-8")
    assert network_references(html) == []
    pngs = embedded_pngs(html)
    assert len(pngs) == 3 and all(p.startswith(b"\x89PNG") for p in pngs)  # reward, structures, benchmarks
    assert "from metrics.jsonl" in html
    assert "Top role names (Table 9)" in html and "Valid-script rate: <b>0.0%</b>" in html
    assert "E-SYNTAX" in html  # why the tiny designer's scripts were refused
    assert 'style="color: #008000; font-weight: bold">for</span>' in html  # pygments, inline styles
    assert html.count('<details id="task-') == 4


@pytest.mark.slow
@pytest.mark.skipif(
    chromium() is None, reason=f"no headless browser installed (looked for {', '.join(CHROMIUM_NAMES)})"
)
def test_report_renders_in_headless_chromium(tiny_runs, tmp_path):
    from PIL import Image

    report = render_html(tiny_runs["a"], tmp_path / "report.html", compare_with=tiny_runs["b"])
    shot = tmp_path / "shot.png"
    profile = tmp_path / "profile"
    profile.mkdir()
    _, err = run_chromium(profile, f"--screenshot={shot}", "--window-size=1280,2000", report.as_uri(),
                          what="finish the screenshot")
    assert shot.is_file(), err.decode(errors="replace")[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 2000)
    colors = image.getcolors(maxcolors=1 << 20)
    assert len(colors) > 100  # text, tables and plots, not a blank page
    present = {rgb for _, rgb in colors}
    for family, rgb in BAR_COLORS.items():
        assert rgb in present, f"the {family} bars of the per-benchmark plot are not on the screenshot"
