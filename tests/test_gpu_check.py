"""The GPU check's dry mode (``bash scripts/gpu_check.sh --device cpu --tiny``): every stage's logic on CPU.

On a CUDA machine the same command without ``--device cpu --tiny`` is the real check; here each stage must
pass or skip for a stated reason (no CUDA, no vLLM), ``--wheels`` must put its packages first, and the report
must be written. Then, adversarially: a stage over its budget is killed and the others still run; a bad model
folder fails one stage with a reason and the stages that need it say why they did not run.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["setup", "env", "models", "gpu-tests", "local-tiny", "local-135m", "step", "verl-engine", "verl-vllm"]


def probe_wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel (``gpucheck_probe`` 1.0), written by hand: what pip installs offline."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "gpucheck_probe-1.0-py3-none-any.whl"
    files = {
        "gpucheck_probe/__init__.py": "VALUE = 1\n",
        "gpucheck_probe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: gpucheck-probe\nVersion: 1.0\n",
        "gpucheck_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append("gpucheck_probe-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr("gpucheck_probe-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def check(out: Path, *args: str, timeout: int = 900) -> tuple[subprocess.CompletedProcess, dict]:
    r = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--out", str(out), *args],
                       env={**__import__("os").environ, "PYTHON": sys.executable}, capture_output=True, text=True,
                       timeout=timeout, check=False)  # fmt: skip
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    return r, {s["name"]: s for s in summary.get("stages", [])}


@pytest.mark.slow
def test_the_dry_mode_runs_every_stage_on_cpu_and_writes_the_report(tmp_path):
    out = tmp_path / "check"
    probe_wheel(tmp_path / "wheels")
    r, stages = check(out, "--device", "cpu", "--tiny", "--wheels", str(tmp_path / "wheels"))
    assert list(stages) == STAGES, r.stdout + r.stderr
    status = {name: s["status"] for name, s in stages.items()}
    logs = {name: Path(s["log"]).read_text()[-2000:] for name, s in stages.items() if s["log"]}
    must_pass = ["setup", "env", "models", "local-tiny", "local-135m", "step"]
    has_verl = importlib.util.find_spec("verl") and importlib.util.find_spec("ray")
    must_pass += ["verl-engine"] if has_verl else []
    assert all(status[n] == "PASS" for n in must_pass), (status, {n: logs.get(n) for n in must_pass if status[n] != "PASS"})
    assert r.returncode == 0 and all(f"[gpu-check] {n}" in r.stdout for n in STAGES)

    assert stages["env"]["details"]["from_wheels"] == {"gpucheck-probe": "1.0"}  # --wheels came first
    assert stages["gpu-tests"]["status"] == "SKIPPED" and "CUDA" in stages["gpu-tests"]["reason"]
    assert stages["verl-vllm"]["status"] == "SKIPPED" and stages["verl-vllm"]["reason"]
    tiny_steps = stages["local-tiny"]["details"]["steps"]
    assert [s["schedule/active"] for s in tiny_steps] == ["executor", "designer"]
    assert tiny_steps[1]["samples/designer"] > 0 and "time/update_s" in tiny_steps[1]
    assert stages["local-135m"]["details"]["steps"][0]["samples/executor"] > 0
    step = stages["step"]["details"]
    assert step["designs"] > 0 and step["raw_seconds"]["designer_generation"] > 0
    assert 0 < step["raw_over_actual"]["designer_generation"]
    if has_verl:
        verl = stages["verl-engine"]["details"]
        assert verl["moved_with_the_advantages"] == [True, True] and verl["logprob_diff_max_verl_vs_rollout"] < 1e-4
    md = (out / "summary.md").read_text()
    assert "| stage | status | seconds | budget s | reason |" in md and "| local-135m | PASS |" in md


def test_a_stage_over_its_budget_is_killed_and_the_others_still_run(tmp_path):
    r, stages = check(tmp_path / "check", "--device", "cpu", "--tiny", "--stages", "env,models", "--budget-scale", "0.005")
    assert r.returncode == 1 and list(stages) == ["env", "models"]
    for s in stages.values():
        assert s["status"] == "FAIL" and "budget" in s["reason"] and s["seconds"] < 10
    assert "[gpu-check] models       FAIL" in r.stdout  # the second stage ran after the first was killed


def test_a_bad_model_folder_fails_one_stage_and_the_stages_that_need_it_say_why(tmp_path):
    (tmp_path / "model").mkdir()
    r, stages = check(tmp_path / "check", "--device", "cpu", "--tiny", "--model", str(tmp_path / "model"),
                      "--stages", "models,local-tiny,step")  # fmt: skip
    assert r.returncode == 1
    assert stages["models"]["status"] == "FAIL" and "config.json" in stages["models"]["reason"]
    assert stages["local-tiny"]["status"] == stages["step"]["status"] == "SKIPPED"
    assert "models stage" in stages["step"]["reason"]


def test_unknown_stage_names_are_refused():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--stages", "env,gpu-test"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and "unknown stage 'gpu-test'" in r.stderr
