"""Choosing the isolation layer: auto picks the strongest, a named layer that is missing is an error,
training on code tasks refuses to start without a layer, evaluation and serving warn; the choice is
recorded. Also the workflow worker's own confinement (what a RestrictedPython escape would meet)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metaagent.config import ConfigError
from metaagent.execution import isolation
from metaagent.execution.isolation import ExecutionConfig, IsolationError, for_config, resolve

NOTHING = {"landlock_abi": 0, "namespaces": False, "namespaces_error": "unshare: Operation not permitted",
           "landlock": False, "landlock_error": "Landlock ABI 0"}  # fmt: skip


@pytest.fixture
def bare_machine(monkeypatch):
    """A machine without Landlock and namespaces; restores this process's layer afterwards."""
    monkeypatch.setattr(isolation, "probe", lambda: dict(NOTHING))
    monkeypatch.setattr(isolation, "_active", isolation._active)
    monkeypatch.setenv(isolation.ENV_VAR, os.environ.get(isolation.ENV_VAR, "auto"))


def test_modes_are_validated():
    with pytest.raises(ConfigError, match="execution.isolation must be one of"):
        ExecutionConfig(isolation="docker")
    with pytest.raises(IsolationError, match="must be one of"):
        resolve("docker")
    assert resolve("none").layer == "none" and resolve("none").child_spec("/tmp") is None


def test_auto_picks_the_strongest_available_layer():
    p = isolation.probe()
    expected = "landlock" if p["landlock"] else "namespaces" if p["namespaces"] else "none"
    assert resolve("auto").layer == expected
    if isolation._landlock_abi() >= isolation.MIN_LANDLOCK_ABI:  # the kernel offers it: applying it must work
        assert p["landlock"], p["landlock_error"]


def test_training_on_code_refuses_without_a_layer_and_says_how_to_proceed(bare_machine):
    with pytest.raises(IsolationError, match=r"refusing to train on code tasks.*execution\.isolation=none"):
        for_config(ExecutionConfig(), purpose="train", code_tasks=True)
    assert for_config(ExecutionConfig(), purpose="train", code_tasks=False).layer == "none"
    assert for_config(ExecutionConfig("none"), purpose="train", code_tasks=True).layer == "none"
    with pytest.raises(IsolationError, match="landlock is not available"):
        for_config(ExecutionConfig("landlock"), purpose="eval")


def test_evaluation_and_serving_warn_without_a_layer(bare_machine, caplog):
    with caplog.at_level(logging.WARNING, logger="metaagent.execution.isolation"):
        assert for_config(ExecutionConfig(), purpose="eval").layer == "none"
    assert "WITHOUT kernel isolation" in caplog.text and "execution.isolation=none" in caplog.text


def test_train_loop_refusal_is_a_train_error(bare_machine):
    from metaagent.data.tasks import Task
    from metaagent.train.config import TrainConfig
    from metaagent.train.loop import TrainError, _isolation_for_training

    code = [Task(id="c", domain="code", question="q", tests={"inputs": ["1"], "outputs": ["1"]})]
    with pytest.raises(TrainError, match="execution.isolation=none"):
        _isolation_for_training(TrainConfig(), code)
    accepted = TrainConfig.load(overrides=["execution.isolation=none"])
    assert _isolation_for_training(accepted, code).layer == "none"


def test_serve_health_reports_the_layer():
    from metaagent.serve.config import ServeConfig
    from metaagent.serve.service import TeamService

    service = TeamService(ServeConfig(model="tiny"), loader=lambda: None)
    assert service.health()["isolation"]["layer"] == isolation.active().layer
    with pytest.raises(ConfigError, match="--isolation"):
        ServeConfig(isolation="docker")


@pytest.mark.skipif(isolation.active().layer == "none", reason="no isolation layer on this machine")
def test_a_confined_workflow_worker_cannot_read_home_write_or_connect(tmp_path):
    """What a RestrictedPython escape inside a worker would meet: the worker's own hardening."""
    secret = Path.home() / f".metaagent-worker-secret-{os.getpid()}"
    secret.write_text("top secret")
    spec = isolation.active().child_spec(None)
    code = f"""
import errno, json, os, socket, sys
from metaagent.workflow.worker import _harden
info = _harden(True, json.loads(sys.argv[1]))
out = {{"info": info}}
for name, f in [("read_home", lambda: open({str(secret)!r}).read()),
                ("write_tmp", lambda: os.open({str(tmp_path / "x")!r}, os.O_WRONLY | os.O_CREAT)),
                ("socket", lambda: socket.socket())]:
    try:
        f(); out[name] = "ESCAPED"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""
    try:
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True,
                              timeout=60, cwd="/")  # fmt: skip
    finally:
        secret.unlink()
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["info"]["isolation"] == isolation.active().layer
    # in its own root (a mount namespace) the host's home and /tmp do not exist; Landlock alone: EACCES
    assert out["read_home"] == ("ENOENT" if isolation.active().namespaces else "EACCES")
    assert out["write_tmp"] in ("EACCES", "ENOENT", "EFBIG") and out["socket"] == "EPERM"
    assert not (tmp_path / "x").exists()


@pytest.mark.skipif(not isolation.probe()["namespaces"], reason="no mount namespaces on this machine")
def test_a_hidden_site_directory_shows_only_the_packages_kept(tmp_path):
    """How site-packages inside a readable library tree is taken out of it: an empty read-only tmpfs, with
    the allowed packages bind-mounted back (read-only)."""
    site = tmp_path / "lib" / "site-packages"
    (site / "allowed").mkdir(parents=True)
    (site / "allowed" / "__init__.py").write_text("VALUE = 1\n")
    (site / "allowed.libs").mkdir()
    (site / "dataset").mkdir()
    (site / "dataset" / "answers.jsonl").write_text("gold")
    code = f"""
import errno, json, os, sys
{isolation.CHILD_IMPORT}
_confine.enter_namespaces(network=False, read_paths=[{str(tmp_path / "lib")!r}], hidden=[{str(site)!r}],
                          keep=[{str(site / "allowed")!r}, {str(site / "allowed.libs")!r}])
out = {{"listing": sorted(os.listdir({str(site)!r})), "kept": open({str(site / "allowed" / "__init__.py")!r}).read()}}
for name, path in (("gold", {str(site / "dataset" / "answers.jsonl")!r}), ("write", {str(site / "new")!r}),
                   ("write_kept", {str(site / "allowed" / "x")!r})):
    try:
        open(path, "w" if name.startswith("write") else "r").close(); out[name] = "ESCAPED"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
print(json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["listing"] == ["allowed", "allowed.libs"] and out["kept"] == "VALUE = 1\n"
    assert out["gold"] == "ENOENT" and out["write"] == out["write_kept"] == "EROFS"
    assert (site / "dataset" / "answers.jsonl").read_text() == "gold"  # the host's view is unchanged


@pytest.mark.skipif(not isolation.probe()["namespaces"], reason="no user namespaces on this machine")
def test_without_a_pids_cgroup_a_user_namespace_counts_the_programs_threads():
    """The fallback for an unprivileged trainer without a pids controller: RLIMIT_NPROC in the program's
    own user namespace counts only its tasks (outside it, every process of the uid counts). As root the
    child switches to nobody first, as a non-root trainer's programs run."""
    spec = dict(isolation.active().child_spec(None), max_tasks=20)
    code = f"""
import json, os, sys, threading
{isolation.CHILD_IMPORT}  # (and json, threading) before the switch: this machine's Python may live in root's home
if os.geteuid() == 0:
    os.setgroups([]); os.setgid(65534); os.setuid(65534)
applied = _confine.confine(**json.loads(sys.argv[1]))
threading.stack_size(64 << 10)
stop, started = threading.Event(), 0
try:
    while started < 500:
        threading.Thread(target=stop.wait, daemon=True).start()
        started += 1
except RuntimeError:
    pass
stop.set()
print(json.dumps({{"started": started, "max_tasks": applied.get("max_tasks")}}))
"""
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code, json.dumps(spec)], capture_output=True,
                          text=True, timeout=60, cwd="/")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["max_tasks"] == 20 and out["started"] == 19  # the main thread is the 20th task
