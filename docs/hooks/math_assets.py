"""MkDocs hook: the math renderer (KaTeX, from the npm registry) is shipped inside the built site, so the
pages read from disk with no network.

The npm package ``katex`` (version :data:`KATEX_VERSION`) is installed once into ``build/docs-vendor/`` (``npm
install --prefix``; ``make docs`` and the first ``mkdocs build`` do it, later builds reuse it) and its
distribution files are added to the site under ``assets/katex/``: ``katex.min.js``, ``katex.min.css``,
the auto-render extension, the ``woff2`` fonts the stylesheet loads, and KaTeX's licence. ``mkdocs.yml``
loads them with ``extra_javascript`` / ``extra_css``; ``docs/javascripts/katex.js`` renders the
``arithmatex`` spans that ``pymdownx.arithmatex`` (generic mode) writes for ``\\( ... \\)`` and ``\\[ ... \\]``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
KATEX_VERSION = "0.19.1"
VENDOR = ROOT / "build" / "docs-vendor"
SITE_DIR = "assets/katex"
#: files of the package's ``dist/`` (and the package root, for the licence) that the site ships
DIST_FILES = ("katex.min.js", "katex.min.css", "contrib/auto-render.min.js")
FONT_GLOB = "fonts/*.woff2"


def katex_package(vendor: Path = VENDOR) -> Path:
    """The installed ``katex`` package directory, installing :data:`KATEX_VERSION` from the npm registry
    when it is missing or another version. Raises :class:`PluginError` naming the fix when npm is not there
    or fails."""
    package = vendor / "node_modules" / "katex"
    manifest = package / "package.json"
    if manifest.is_file() and f'"version": "{KATEX_VERSION}"' in manifest.read_text(encoding="utf-8"):
        return package
    npm = shutil.which("npm")
    if npm is None:
        raise PluginError(
            f"the docs ship KaTeX {KATEX_VERSION} from the npm registry, but npm is not installed: "
            "apt-get install npm (or install Node.js), then build again"
        )
    cmd = [npm, "install", "--no-save", "--no-audit", "--no-fund", "--no-package-lock"]
    cmd += ["--prefix", str(vendor)]
    proc = subprocess.run([*cmd, f"katex@{KATEX_VERSION}"], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or not manifest.is_file():
        raise PluginError(f"npm install katex@{KATEX_VERSION} failed:\n{proc.stderr[-2000:]}")
    return package


def asset_paths(package: Path) -> list[tuple[Path, str]]:
    """``(source file, path in the site)`` for every file the site ships from ``package``."""
    dist = package / "dist"
    files = [(dist / name, f"{SITE_DIR}/{name}") for name in DIST_FILES]
    files += [(font, f"{SITE_DIR}/fonts/{font.name}") for font in sorted(dist.glob(FONT_GLOB))]
    files.append((package / "LICENSE", f"{SITE_DIR}/LICENSE.txt"))
    missing = [str(src) for src, _ in files if not src.is_file()]
    if missing or not any("/fonts/" in dest for _, dest in files):
        lacks = missing or [FONT_GLOB]
        raise PluginError(f"the katex package at {package} lacks {lacks}: remove {VENDOR} and build again")
    return files


def on_files(files, config):
    for src, dest in asset_paths(katex_package()):
        files.append(File.generated(config, dest, abs_src_path=str(src)))
    return files
