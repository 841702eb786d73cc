"""A non-editable install works: build the wheel, install it into a fresh venv outside the checkout, train
one step of the packaged ``tiny`` config and one of the default config on ``--model tiny``, evaluate with
``metaagent-eval``, load the template bank and a fixed workflow, resolve ``embedded-sft``; the wheel carries
the checkout's ``configs/`` and ``templates/`` inside the package, the shipped GSM8K and MBPP copies with
their licences, the licence and the project metadata.

The fresh venv reuses this venv's third-party packages through a ``.pth`` line (no network), but not its
editable metaagent: a ``.pth`` line adds a directory to ``sys.path`` without running the ``.pth`` files in
it, so metaagent can only come from the wheel (asserted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def run(cmd: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, f"{cmd}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist")], tmp)
    (wheel,) = (tmp / "dist").glob("metaagent-*.whl")
    run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "v")], tmp)
    v_python = tmp / "v" / "bin" / "python"
    v_site = Path(run([str(v_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp).stdout.strip())
    (v_site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # third-party packages only
    run([sys.executable, "-m", "pip", "--python", str(v_python), "install", "--no-deps", "-q", str(wheel)], tmp)
    return tmp


def test_the_wheel_carries_the_data(venv):
    import zipfile

    (wheel,) = (venv / "dist").glob("metaagent-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # the checkout's top-level configs/ and templates/ (the source of truth), every file, inside the package
    for folder in ("configs", "templates"):
        files = [p for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        shipped = {f"metaagent/{p.relative_to(ROOT).as_posix()}" for p in files}
        assert shipped and shipped <= set(names), sorted(shipped - set(names))
    assert "metaagent/configs/default.yaml" in names
    assert "metaagent/templates/fixed/unity_qa_parallel.py" in names
    assert "metaagent/policy/cold_start_adapter/adapter_model.safetensors" in names
    assert "metaagent/data/suite/heldout/code.jsonl.gz" in names  # the suite's held-out split, compressed
    for shipped in ("gsm8k/test.jsonl.xz", "mbpp/sanitized-mbpp.json.xz"):  # the public benchmarks shipped
        folder = f"metaagent/data/benchmarks/{shipped.split('/')[0]}"
        assert {f"{folder}/{shipped.split('/')[1]}", f"{folder}/LICENSE", f"{folder}/SOURCE.md"} <= set(names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names[-10:]
    (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    meta = zipfile.ZipFile(wheel).read(meta_name).decode()
    assert "License-Expression: Apache-2.0" in meta and "Provides-Extra: embedded" in meta
    assert "Classifier: Topic :: Scientific/Engineering :: Artificial Intelligence" in meta
    assert "Project-URL: Paper, https://arxiv.org/abs/2605.14212" in meta


def test_installed_wheel_loads_templates_and_resolves_the_cold_start(venv):
    probe = (
        "import json, metaagent\n"
        "from metaagent.workflow import load_templates\n"
        "from metaagent.policy.cold_start import cold_start_dir\n"
        "from metaagent.resources import config_path, template_dir\n"
        "from metaagent.rollout.engine import FrozenDesign\n"
        "print(json.dumps({'file': metaagent.__file__, 'templates': len(load_templates()),\n"
        "  'fixed': FrozenDesign.resolve('unity_qa_parallel').name, 'bank': str(template_dir()),\n"
        "  'adapter': str(cold_start_dir()), 'adapter_ok': (cold_start_dir() / 'adapter_config.json').is_file(),\n"
        "  'tiny': str(config_path('tiny'))}))\n"
    )
    out = json.loads(run([str(venv / "v" / "bin" / "python"), "-c", probe], venv).stdout.strip().splitlines()[-1])
    site = str(venv / "v")
    assert out["file"].startswith(site), out  # metaagent comes from the wheel, not the checkout
    assert out["templates"] >= 13 and out["adapter_ok"] and out["adapter"].startswith(site)
    assert out["tiny"].startswith(site) and out["bank"].startswith(site)
    assert out["fixed"] == "template:unity_qa_parallel"


def test_installed_wheel_trains_one_step_of_the_packaged_tiny_config(venv):
    out = venv / "run"
    r = run([str(venv / "v" / "bin" / "train-metaagent"), "--config", "tiny", "--steps", "1", "--out", str(out), "--quiet"], venv)
    assert (out / "metrics.jsonl").is_file(), r.stdout[-2000:]
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert row["step"] == 0 and "rollout/reward/executor" in row


def test_installed_wheel_keeps_its_gold_answers_from_tested_programs(venv):
    """In a wheel install the bundled gold answers and hidden tests sit in site-packages; a tested program
    (confined by either kernel layer) cannot read them, though the host can."""
    probe = (
        "import json, os, metaagent\n"
        "from metaagent.execution import isolation\n"
        "from metaagent.execution.code import run_code_tests\n"
        "data = os.path.join(os.path.dirname(metaagent.__file__), 'data', 'bundled', 'code_references.jsonl')\n"
        "program = f'try:\\n    print(len(open({data!r}).read()))\\nexcept OSError as e:\\n    print(e.errno)\\n'\n"
        "result = run_code_tests(program, {'inputs': [''], 'outputs': ['']})\n"
        "print(json.dumps({'layer': isolation.active().layer, 'ns': isolation.active().namespaces,\n"
        "  'host': os.path.getsize(data) > 0,\n"
        "  'file': data, 'program': result.tests[0].actual.strip()}))\n"
    )
    out = json.loads(run([str(venv / "v" / "bin" / "python"), "-c", probe], venv).stdout.strip().splitlines()[-1])
    assert out["file"].startswith(str(venv / "v")) and out["host"]
    if out["layer"] == "none":
        pytest.skip("reads are restricted by a kernel layer only (here: none)")
    # absent from the program's own root (a mount namespace): ENOENT; Landlock alone: EACCES
    assert out["program"] == ("2" if out["ns"] else "13")


def test_installed_wheel_trains_one_step_of_the_default_config_on_the_tiny_model(venv):
    out = venv / "run-default"
    bin_ = venv / "v" / "bin"
    run([str(bin_ / "train-metaagent"), "--steps", "1", "--model", "tiny", "--out", str(out), "--quiet"],
        venv)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["step"] >= 0] == [0]
    assert (out / "checkpoints" / "step_00000001" / "meta.json").is_file()
    assert json.loads((out / "run.json").read_text())["models"]  # the run names its models


def test_installed_wheel_evaluates(venv):
    out = venv / "eval"
    cmd = [str(venv / "v" / "bin" / "metaagent-eval"), "--model", "tiny", "--methods", "sa", "--benchmarks",
           "bundled:test/math", "--limit", "2", "--n", "1", "--no-html", "--out", str(out)]  # fmt: skip
    r = run(cmd, venv)
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and "results:" in r.stdout, r.stdout[-2000:]
