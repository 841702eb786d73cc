"""The policy tests under the newest transformers release, not only the pinned one (``transformers<5.11``).

The decode loop's KV cache builds on transformers' cache classes; a release that changes them breaks every
generation for the first user who upgrades. This test asks PyPI for the newest release, installs it into a
throwaway virtual environment that sees this environment's packages (torch, the project) behind its own, and
runs ``tests/policy`` there. The environment is kept under ``$METAAGENT_CACHE/newest-transformers/`` (one per
release and Python), so a later run only runs the tests. Skipped, saying why, when PyPI cannot be reached.
"""

from __future__ import annotations

import os
import re
import site
import subprocess
import sys
import venv
import warnings
from pathlib import Path

import pytest

from metaagent.policy.models import cache_dir

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
TESTS = "tests/policy"
#: the pip environment for the throwaway venv: no machine-wide constraints (they pin what this test must move)
PIP_ENV = {"PIP_CONSTRAINT": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


#: how many releases, newest first, to try when the index lacks a dependency of the newest one
FALLBACK_RELEASES = 3


class MissingDependency(Exception):
    """The package index has the release but not one of its dependencies (a registry's gap, not ours)."""


def newest_release() -> str:
    try:
        r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "transformers"], capture_output=True,
                           text=True, timeout=120, env={**os.environ, **PIP_ENV})  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.skip("PyPI did not answer within 120 s (pip index versions transformers)")
    m = re.search(r"^transformers \(([^)]+)\)", r.stdout, re.M)
    if r.returncode != 0 or m is None:
        pytest.skip(f"PyPI is unreachable from here: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    return m.group(1)


def releases() -> list[str]:
    """The newest releases, newest first (``pip index versions``' list), the newest of all at the head."""
    newest = newest_release()
    r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "transformers"], capture_output=True,
                       text=True, timeout=120, env={**os.environ, **PIP_ENV})  # fmt: skip
    m = re.search(r"Available versions: (.+)", r.stdout)
    listed = [v.strip() for v in m.group(1).split(",")] if m else []
    return [newest, *[v for v in listed if v != newest and not re.search(r"[a-z]", v)]][:FALLBACK_RELEASES]


def throwaway_env(version: str) -> Path:
    """A venv with transformers ``version`` in front of this environment's site-packages; its python."""
    home = cache_dir() / "newest-transformers" / f"transformers-{version}-py{sys.version_info.major}.{sys.version_info.minor}"
    python = home / "bin" / "python"
    marker = home / "ready"
    if marker.is_file():
        return python
    venv.EnvBuilder(clear=True, with_pip=False).create(home)
    own = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    # after the venv's own packages: this environment's (torch, pytest, the editable project through its .pth)
    parents = [p for p in site.getsitepackages() if Path(p).is_dir()]
    Path(own, "zz_metaagent_parent.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in parents))
    r = subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"transformers=={version}"],
                       capture_output=True, text=True, timeout=900, env={**os.environ, **PIP_ENV})  # fmt: skip
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        if any(w in " ".join(tail) for w in ("Could not fetch", "NewConnectionError", "Temporary failure", "Network")):
            pytest.skip(f"PyPI is unreachable from here: {tail}")
        missing = re.search(r"No matching distribution found for (\S+)", " ".join(tail))
        if missing and not missing.group(1).startswith("transformers"):
            raise MissingDependency(f"transformers=={version} needs {missing.group(1)}, which the index lacks")
        raise AssertionError(f"pip could not install transformers=={version}: {tail}")
    marker.write_text(version)
    return python


def test_the_policy_tests_pass_with_the_newest_transformers():
    # the newest release the package index can install: where the index lacks a dependency of the newest (a
    # registry mirror behind PyPI), the next one, with a warning naming what was passed over
    passed_over = []
    for version in releases():
        try:
            python = throwaway_env(version)
            break
        except MissingDependency as e:
            passed_over.append(str(e))
    else:
        pytest.fail(f"no recent transformers release installs from this index: {passed_over}")
    if passed_over:
        warnings.warn(f"tested transformers=={version}, not the newest: {'; '.join(passed_over)}", stacklevel=1)
    seen = subprocess.run([str(python), "-c", "import transformers, torch, metaagent; print(transformers.__version__)"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip
    assert seen.returncode == 0 and seen.stdout.strip() == version, seen.stdout + seen.stderr
    r = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", TESTS],
                       capture_output=True, text=True, timeout=1800, cwd=ROOT)  # fmt: skip
    summary = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-500:]
    assert r.returncode == 0, f"transformers {version}: {summary}\n" + r.stdout[-6000:]
