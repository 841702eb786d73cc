"""``metaagent.lazy.import_file``: the one loader of a module from a file path (scripts, tests and reward files);
``after_import``: a patch applied when a module is first imported."""

from __future__ import annotations

import sys

import pytest

from metaagent.lazy import after_import, import_file


def test_a_file_is_imported_once_under_its_name(tmp_path, monkeypatch):
    path = tmp_path / "helper.py"
    path.write_text(
        "from dataclasses import dataclass\nLOADS = []\nLOADS.append(1)\n\n@dataclass\nclass Row:\n    x: int = 0\n"
    )
    monkeypatch.delitem(sys.modules, "helper_x", raising=False)
    module = import_file(path, "helper_x")
    assert sys.modules["helper_x"] is module and module.Row(2).x == 2  # a dataclass finds its module
    assert import_file(str(path), "helper_x") is module and module.LOADS == [1]  # the second call: the same module
    monkeypatch.delitem(sys.modules, "helper_x")


def test_a_missing_file_or_a_taken_name_is_one_line_naming_the_file(tmp_path):
    with pytest.raises(ImportError, match=r"^no file .*nowhere\.py \(to import as 'nowhere_x'\)$"):
        import_file(tmp_path / "nowhere.py", "nowhere_x")
    assert "nowhere_x" not in sys.modules
    (tmp_path / "other.py").write_text("")
    with pytest.raises(ImportError, match=r"other\.py as 'json': that name is already the module from .*json"):
        import_file(tmp_path / "other.py", "json")


def test_a_file_that_raises_leaves_no_module_behind(tmp_path, monkeypatch):
    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('boom')\n")
    monkeypatch.delitem(sys.modules, "broken_x", raising=False)
    with pytest.raises(RuntimeError, match="boom"):
        import_file(path, "broken_x")
    assert "broken_x" not in sys.modules
    path.write_text("VALUE = 3\n")
    assert import_file(path, "broken_x").VALUE == 3  # fixed, it imports
    monkeypatch.delitem(sys.modules, "broken_x")


def test_a_patch_runs_on_the_modules_first_import_or_at_once_when_it_is_imported(tmp_path, monkeypatch):
    (tmp_path / "late_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "late_module", raising=False)
    seen = []
    finders = len(sys.meta_path)
    after_import("late_module", lambda m: seen.append(m.VALUE))
    assert seen == []  # not imported yet: nothing is loaded now
    import late_module  # noqa: F401

    assert seen == [1] and len(sys.meta_path) == finders  # patched once, after its code ran; the finder gone
    after_import("late_module", lambda m: seen.append(m.VALUE + 1))
    assert seen == [1, 2]
    monkeypatch.delitem(sys.modules, "late_module")
