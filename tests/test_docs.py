"""The documentation site: ``mkdocs build --strict`` succeeds (broken links and unresolved API references fail
it), the configuration reference lists every config field, the pages speak of the project and not of its
development history, and the built Quickstart and an API page render in headless Chromium."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from builders import CHROMIUM_NAMES, chromium, run_chromium

from metaagent.lazy import import_file

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MKDOCS_MISSING = "mkdocs is not installed: pip install -e '.[docs]' (make test installs it)"


def _have_mkdocs() -> bool:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
        import mkdocstrings_handlers.python  # noqa: F401
    except ImportError:
        return False
    return True


needs_mkdocs = pytest.mark.skipif(not _have_mkdocs(), reason=MKDOCS_MISSING)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-4000:]}"
    return out


@needs_mkdocs
def test_the_strict_build_makes_every_page_of_the_nav(site):
    import yaml

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from pages(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from pages(value)

    nav = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)["nav"]
    for page in pages(nav):
        built = site / (page.removesuffix(".md") + ".html")  # use_directory_urls: false
        assert built.is_file(), f"{page} was not built ({built})"


@needs_mkdocs
def test_the_configuration_reference_has_every_field_of_every_command(site):
    generated_pages = import_file(DOCS / "hooks" / "generated_pages.py", "generated_pages")
    from metaagent.cli.flags import _walk

    html = (site / "reference" / "configuration.html").read_text(encoding="utf-8")
    for command, _module, spec, _purpose in generated_pages.COMMANDS:
        assert f"<code>{command}</code>" in html
        for name, *_ in _walk(generated_pages._load(spec)):
            assert f"<dt><code>{name}</code></dt>" in html, f"{command}: field {name} missing"
    # one block per field: a field with a declared range, its flag and alias, and its default, as --help shows
    block = re.search(r"<dt><code>schedule\.stage_len</code></dt>\s*<dd>(.*?)</dd>", html, re.S)
    assert block is not None
    assert "<code>--stage-len</code>" in block.group(1) and "<code>&gt; 0</code>" in block.group(1)
    assert "<code>30</code>" in block.group(1) and "default" in block.group(1)
    assert "\\|" not in html  # a type like STR|null reads without the table escape
    headings = re.findall(r"<h3[^>]*>(.*?)<a", html, re.S)
    assert headings and len(headings) == len(set(headings)), "a config section is split over two headings"


@needs_mkdocs
def test_the_benchmark_curves_are_served_from_the_committed_results(site):
    html = (site / "benchmarks.html").read_text(encoding="utf-8")
    curves = re.findall(r'(?:src|href)="(results/[^"]+\.png)"', html)
    assert curves, "the benchmarks page shows no committed curve"
    for rel in curves:
        assert (site / rel).resolve().is_file(), rel
    assert "avg@3" in html  # the evaluation table is inlined from benchmarks/results/eval_embedded/table.md


@needs_mkdocs
def test_the_layout_rows_are_the_package_docstrings_and_a_package_without_one_fails_the_build(tmp_path):
    from mkdocs.exceptions import PluginError

    generated_pages = import_file(DOCS / "hooks" / "generated_pages.py", "generated_pages")
    page = generated_pages.layout_markdown((DOCS / "layout.md").read_text(encoding="utf-8"))
    assert generated_pages.DOC_MARK not in page
    for init in sorted((ROOT / "metaagent").glob("*/__init__.py")):  # every room's row carries its docstring
        assert generated_pages._summary(generated_pages._docstring(init)).removesuffix(".") in page, init
    package = tmp_path / "metaagent"
    (package / "a").mkdir(parents=True)
    (package / "__init__.py").write_text('"""The package."""\n')
    (package / "a" / "__init__.py").write_text("x = 1\n")
    row = "| | `metaagent/a/` | {{ docstring }} |"
    with pytest.raises(PluginError, match=r"package\(s\) without a docstring: metaagent/a;"):
        generated_pages.layout_markdown(row, package)
    (package / "a" / "__init__.py").write_text('"""Room a: what it holds."""\n')
    assert generated_pages.layout_markdown(row, package) == "| | `metaagent/a/` | Room a: what it holds. |\n"
    (package / "b").mkdir()
    (package / "b" / "__init__.py").write_text('"""Room b."""\n')
    with pytest.raises(PluginError, match=r"no row names the package\(s\) or module\(s\) \['b'\]"):
        generated_pages.layout_markdown(row, package)


def test_the_pages_speak_of_the_project_not_its_history():
    problems = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for pattern, what in (
            (r"(?i)\bissue\s*#?\d+|(?<![\w&])#\d{1,3}\b", "an issue number"),
            (r"\.\./shared|/work/|/home/|/tmp/", "a local path"),
            (r"(?i)\bthis session\b", "development history"),
        ):
            for match in re.finditer(pattern, text):
                problems.append(f"{page.relative_to(ROOT)}: {what}: {match.group(0)!r}")
    assert problems == []


def test_the_files_and_packaged_configs_the_pages_name_exist():
    missing = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for path in re.findall(r"\b((?:scripts|benchmarks|examples)/[\w/.-]+\.(?:py|sh|md|png))", text):
            if not (ROOT / path).is_file():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
        for name in re.findall(r"--config (?:configs/)?([a-z0-9_]+)(?:\.yaml)?\b(?![/.])", text):
            if not (ROOT / "configs" / f"{name}.yaml").is_file():
                missing.append(f"{page.relative_to(ROOT)}: --config {name}")
    assert missing == []


def _dump_dom(url: str, profile: Path) -> str:
    out, err = run_chromium(profile, "--dump-dom", url, what=f"render {url}")
    assert out, err.decode(errors="replace")[-2000:]
    return out.decode("utf-8", errors="replace")


@needs_mkdocs
@pytest.mark.skipif(
    chromium() is None, reason=f"no headless browser installed (looked for {', '.join(CHROMIUM_NAMES)})"
)
@pytest.mark.parametrize(
    ("page", "title", "code"),
    [
        ("quickstart.html", "Quickstart", "make demo"),
        ("api/workflow.html", "metaagent.workflow", "check_script(script)"),
    ],
)
def test_a_built_page_renders_its_title_and_a_code_block_in_headless_chromium(site, tmp_path, page, title, code):
    dom = _dump_dom((site / page).as_uri(), tmp_path / "profile")
    assert re.search(rf"<title>{re.escape(title)} - metaagent</title>", dom)
    heading = re.search(r"<h1[^>]*>(.*?)</h1>", dom, re.S)
    assert heading is not None and title in re.sub(r"<[^>]+>", "", heading.group(1))
    blocks = re.findall(r"<pre[^>]*>.*?</pre>", dom, re.S)
    assert any(code in re.sub(r"<[^>]+>", "", b) for b in blocks), f"no code block with {code!r} on {page}"


@needs_mkdocs
def test_the_site_reads_from_disk_without_a_network(site):
    """Pages are ``page.html`` files whose relative links all land on a built file, and nothing (script,
    stylesheet, font) is loaded from another host: KaTeX and its fonts and licence are shipped in the site."""
    external, broken = [], []
    for page in sorted(set(site.rglob("*.html")) - {site / "404.html"}):  # 404.html is for a web server
        html = page.read_text(encoding="utf-8")
        for tag in re.findall(r"<(?:script|link|img)\b[^>]*>", html):
            if re.search(r'(?:src|href)="(?:https?:)?//', tag) and 'rel="canonical"' not in tag:
                external.append(f"{page.relative_to(site)}: {tag}")
        for href in re.findall(r'<a\b[^>]*href="([^"#?]+\.html)(?:#[^"]*)?"', html):
            if "://" not in href and not (page.parent / href).resolve().is_file():
                broken.append(f"{page.relative_to(site)} -> {href}")
    assert external == [] and broken == []
    katex = site / "assets" / "katex"
    for name in ("katex.min.js", "katex.min.css", "contrib/auto-render.min.js", "LICENSE.txt"):
        assert (katex / name).is_file(), name
    assert list((katex / "fonts").glob("*.woff2")), "no KaTeX font shipped"
    assert "MIT License" in (katex / "LICENSE.txt").read_text(encoding="utf-8")


@needs_mkdocs
@pytest.mark.skipif(
    chromium() is None, reason=f"no headless browser installed (looked for {', '.join(CHROMIUM_NAMES)})"
)
def test_the_math_renders_from_disk_in_headless_chromium(site, tmp_path):
    page = site / "concepts" / "credit.html"
    assert page.read_text(encoding="utf-8").count('class="arithmatex"') >= 1
    out, err = run_chromium(
        tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom", page.as_uri(),
        what="render the math",
    )
    dom = out.decode("utf-8", errors="replace")
    assert 'class="katex-display"' in dom or 'class="katex"' in dom, err.decode(errors="replace")[-2000:]
    assert "katex-error" not in dom
