"""The repository stays small and machine-independent.

A checkout has to travel to machines without network (a GPU machine takes a working tree of at most
64 MiB), so: no tracked file above 2 MB outside a short allow-list, committed results under 10 MB (raw
rollout records are committed compressed and without log-probs, ``scripts/compress_records.py``), the whole
tracked tree under 34 MiB; and no absolute path of one machine (``/work/...``, ``/home/<user>/...``, an
interpreter such as ``/tmp/x/.venv/bin/python``) in any tracked text file: the commands and scripts must run
from any checkout. No script or test edits ``sys.path``: ``metaagent`` comes from the checkout's environment
(the install, or ``PYTHONPATH`` the checkout), and a sibling script or a test helper is loaded from its file
(``metaagent.lazy.import_file``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000

#: tracked files allowed above MAX_FILE, each with its reason
LARGE_FILES = {
    "metaagent/policy/cold_start_adapter/adapter_model.safetensors": "the shipped cold-start LoRA (embedded-sft)",
    "metaagent/policy/suite_cold_start_adapter/adapter_model.safetensors": "the suite cold-start LoRA (embedded-sft-suite)",
}
MAX_FILE = 2 * MB
MAX_RESULTS = 10 * MB  # everything under benchmarks/results/
MAX_TREE = 34 * 2**20  # about half of the 64 MiB a GPU machine takes, the rest for wheels and a model
#: an absolute path into one machine's home, work or mount folders (not /tmp, not ~, not inside a URL)
MACHINE_PATH = re.compile(r"(?<![\w.~/])/(?:work|home|root|Users|mnt|scratch|data|opt)/[\w.-]+")
#: an absolute path to a virtual environment or a Python interpreter outside the system's /usr and /bin (e.g.
#: /tmp/x/.venv/bin/python): scripts take PY=... or the checkout's .venv/bin/python instead
INTERPRETER_PATH = re.compile(
    r"(?<![\w.~/:])/(?!usr/|bin/)[\w.+-]+(?:/[\w.+-]+)*?/(?:\.?venv\b|bin/python[\d.]*)"
)
#: data files that quote paths as recorded (fixtures of old record formats), and this file's own examples
PATH_EXEMPT = ("tests/fixtures/", "tests/test_repository.py")
#: an edit of the import path: ``sys.path.insert(...)`` (append, extend, remove, pop, clear), ``sys.path[i] = ``,
#: ``sys.path += ``, ``sys.path = ``, ``del sys.path[i]``
SYS_PATH_EDIT = re.compile(
    r"\bsys\.path\s*(?:\.\s*(?:insert|append|extend|remove|pop|clear)\s*\(|\[[^\]]*\]\s*=(?!=)|\+=|=(?!=))"
    r"|\bdel\s+sys\.path\b"
)
#: the folders whose Python and shell files may not edit sys.path (the package's own sandbox children do, to
#: reach their helper modules without site or PYTHONPATH: metaagent.execution.isolation.CHILD_IMPORT)
NO_PATH_EDITS = ("scripts", "benchmarks", "examples", "tests")


def tracked() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an installed package or an unpacked archive): nothing is tracked here")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [Path(p) for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def test_no_tracked_file_is_large_unless_allowed():
    files = {str(p): (ROOT / p).stat().st_size for p in tracked()}
    large = {p: s for p, s in files.items() if s > MAX_FILE and p not in LARGE_FILES}
    assert not large, (
        f"tracked files above {MAX_FILE // MB} MB: {large}. Compress raw records (python scripts/compress_records.py "
        "FOLDER), keep large data out of git, or add the file with its reason to LARGE_FILES in tests/test_repository.py"
    )
    assert set(LARGE_FILES) <= set(files), f"allow-listed files that no longer exist: {set(LARGE_FILES) - set(files)}"


def test_committed_results_and_the_whole_tree_stay_small():
    sizes = {str(p): (ROOT / p).stat().st_size for p in tracked()}
    results = sum(s for p, s in sizes.items() if p.startswith("benchmarks/results/"))
    assert results <= MAX_RESULTS, (
        f"benchmarks/results/ holds {results / MB:.1f} MB (limit {MAX_RESULTS / MB:.0f} MB); compress its raw "
        "records without their log-probs: "
        "python scripts/compress_records.py benchmarks/results --drop-logprobs"
    )
    total = sum(sizes.values())
    assert total <= MAX_TREE, f"the tracked tree is {total / 2**20:.1f} MiB (limit {MAX_TREE / 2**20:.0f} MiB)"


def machine_paths(text: str) -> list[str]:
    return sorted({*MACHINE_PATH.findall(text), *INTERPRETER_PATH.findall(text)})


def test_the_path_check_finds_machine_paths_and_only_those():
    assert machine_paths('PY=${PY:-/work/main/.venv/bin/python}') == ["/work/main", "/work/main/.venv"]
    assert machine_paths("cp /home/alice/model.gguf . && ls /Users/bob") == ["/Users/bob", "/home/alice"]
    assert machine_paths("PY=/tmp/x/.venv/bin/python bash run.sh") == ["/tmp/x/.venv"]
    assert machine_paths("source /srv/envs/venv/bin/activate; /opt/conda/bin/python3 -m x") == [
        "/opt/conda", "/opt/conda/bin/python3", "/srv/envs/venv"]  # fmt: skip
    for fine in ("/tmp/run", "~/.cache/metaagent", "https://example.org/home/page", ".venv/bin/python",
                 "runs/work/x", "s3://bucket/data/x", "#!/usr/bin/env python3", "/usr/bin/python3 -V",
                 "/usr/local/bin/python3.11", "PY=${PY:-.venv/bin/python}", "~/venv/bin/python", "/dev/null",
                 "/proc/self/status", '("/usr/lib", "/lib64")',
                 "https://x.org/a/venv/bin/python"):  # fmt: skip
        assert machine_paths(fine) == [], fine


def test_no_tracked_file_names_a_path_of_one_machine():
    found = []
    for path in tracked():
        if str(path).startswith(PATH_EXEMPT):
            continue
        try:
            text = (ROOT / path).read_text(encoding="utf-8")
        except UnicodeDecodeError:  # binary files (weights, images, compressed records)
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            found += [f"{path}:{lineno}: {hit}" for hit in machine_paths(line)]
    assert not found, (
        "absolute paths of one machine in tracked files (use paths relative to the checkout, and PY=... or "
        ".venv/bin/python for the interpreter):\n" + "\n".join(found)
    )


def test_the_benchmarks_readme_has_a_row_per_benchmark_script_and_its_links_exist():
    readme = ROOT / "benchmarks" / "README.md"
    if not readme.is_file():
        pytest.skip("no benchmarks/ here (an installed package): the benchmarks ship with a checkout only")
    text = readme.read_text(encoding="utf-8")
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*") if p.suffix in (".py", ".sh"))
    missing = [name for name in scripts if f"| `{name}`" not in text and f"+ `{name}`" not in text]
    assert scripts and not missing, f"benchmarks/README.md has no row for {missing}: add one (figure, date, command)"
    links = re.findall(r"\]\((results/[^)]+)\)", text)
    broken = [link for link in links if not (readme.parent / link).exists()]
    assert links and not broken, f"benchmarks/README.md links to missing results: {broken}"


def test_the_scripts_readme_has_a_row_per_script():
    readme = ROOT / "scripts" / "README.md"
    if not readme.is_file():
        pytest.skip("no scripts/ here (an installed package): the scripts ship with a checkout only")
    text = readme.read_text(encoding="utf-8")
    rows = [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`([^`]+)`", row)}
    scripts = sorted(p.name for p in (ROOT / "scripts").glob("*") if p.suffix in (".py", ".sh"))
    missing = [name for name in scripts if name not in named]
    assert scripts and not missing, f"scripts/README.md has no row for {missing}: add one (what it is for)"


def sys_path_edits(text: str) -> list[int]:
    """The line numbers of ``text`` that edit ``sys.path``."""
    return [n for n, line in enumerate(text.splitlines(), 1) if SYS_PATH_EDIT.search(line)]


def test_the_sys_path_check_finds_edits_and_only_those():
    for edit in ("sys.path.insert(0, str(ROOT))", "    sys.path.append(entry)", "sys.path.remove(x)",
                 "sys.path[:0] = [here]", "sys.path += [x]", "sys.path = [x, *sys.path]", "del sys.path[0]",
                 'code = "import sys; sys.path.insert(0, {dir!r})"', "sys.path.extend(dirs)"):  # fmt: skip
        assert sys_path_edits(edit) == [1], edit
    for fine in ("print(sys.path)", "if x in sys.path:", "sys.path[0] == here", "monkeypatch.syspath_prepend(d)",
                 "tests/ is on ``sys.path`` through conftest.py", "paths = list(sys.path)"):  # fmt: skip
        assert sys_path_edits(fine) == [], fine


def test_no_script_benchmark_example_or_test_edits_sys_path():
    """``python scripts/x.py`` and the tests import ``metaagent`` from the checkout's environment and load a
    sibling file with ``metaagent.lazy.import_file``: an edited ``sys.path`` would hide which ``metaagent``
    (or which helper of the same name) a process runs."""
    found = []
    for folder in NO_PATH_EDITS:
        for path in sorted((ROOT / folder).rglob("*")):
            rel = path.relative_to(ROOT)
            if path.suffix not in (".py", ".sh") or str(rel) == "tests/test_repository.py" or not path.is_file():
                continue
            found += [f"{rel}:{n}" for n in sys_path_edits(path.read_text(encoding="utf-8"))]
    assert not found, (
        "sys.path edited (import metaagent from the environment; load a sibling or a test helper with "
        "metaagent.lazy.import_file(path, name)):\n" + "\n".join(found)
    )
