"""Hub ids (``org/name``) resolve through huggingface_hub's cache, tested offline against a cache this test
builds: the tiny model saved in the hub layout ``models--org--name/snapshots/<commit>/`` with ``refs/main``.
A path or id that cannot be had is refused in one line before torch is imported (checked in a fresh process
by ``sys.modules`` at the error, not by timing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from metaagent.policy import models

ROOT = Path(__file__).resolve().parents[2]
REPO = "tiny-org/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> Path:
    """A hub cache holding ``REPO`` at ``COMMIT`` (main) and, as tag ``v0`` (refs/v0), the same files."""
    cache = tmp_path_factory.mktemp("hub")
    repo = cache / f"models--{REPO.replace('/', '--')}"
    shutil.copytree(models.resolve_model("tiny"), repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "refs" / "v0").write_text(COMMIT)
    return cache


@pytest.fixture
def offline(monkeypatch, hub_cache):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    return hub_cache


def test_a_cached_hub_id_resolves_to_its_snapshot_and_loads(offline):
    import torch

    snapshot = offline / f"models--{REPO.replace('/', '--')}" / "snapshots" / COMMIT
    assert models.resolve_model(REPO) == str(snapshot)
    assert models.resolve_model(f"{REPO}@v0") == str(snapshot)  # a tag (a branch or a commit the same way)
    assert models.locate_model(REPO) == str(snapshot)
    hub_model, hub_tok = models.load_model_and_tokenizer(REPO)
    tiny_model, tiny_tok = models.load_model_and_tokenizer("tiny")
    ids = torch.tensor([tiny_tok.encode("2 + 2 =")])
    assert hub_tok.encode("2 + 2 =") == ids[0].tolist()
    with torch.no_grad():
        assert torch.equal(hub_model(ids).logits, tiny_model(ids).logits)


def test_an_id_missing_from_the_cache_offline_says_what_to_do(offline):
    for spec in ("tiny-org/other", f"{REPO}@no-such-branch"):
        with pytest.raises(FileNotFoundError) as err:
            models.resolve_model(spec)
        msg = str(err.value)
        assert "\n" not in msg and spec in msg and "HF_HUB_OFFLINE" in msg and "hf download" in msg, msg


def test_a_local_folder_wins_over_a_hub_id_of_the_same_name(offline, tmp_path, monkeypatch):
    local = tmp_path / "tiny-org" / "tiny-llama"
    shutil.copytree(models.resolve_model("tiny"), local)
    monkeypatch.chdir(tmp_path)
    assert models.resolve_model(REPO) == REPO  # the relative path, not the hub snapshot


def test_a_cached_snapshot_that_is_no_model_is_refused(offline):
    repo = offline / "models--tiny-org--data-only"
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "snapshots" / COMMIT / "README.md").write_text("a dataset card")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        models.resolve_model("tiny-org/data-only")


PROBE = """
import json, sys
from metaagent.cli.train import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    loaded = {name: name in sys.modules for name in ("torch", "transformers")}
    print(json.dumps({"code": e.code, **loaded}))
"""


@pytest.mark.parametrize("model", ["/no/such/path", "no-such-org/no-such-model", "embeded"])
def test_train_metaagent_refuses_a_bad_model_before_torch_is_imported(model, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-c", PROBE, "--model", model, "--steps", "1", "--out", str(tmp_path / "run")],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"code": 2, "torch": False, "transformers": False}, (out, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("train-metaagent: ") and model in lines[0], r.stderr
    assert not (tmp_path / "run").exists()  # nothing written for a run that cannot start


@pytest.mark.slow
def test_train_metaagent_trains_a_step_of_a_cached_hub_model_offline(hub_cache, tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache)}
    cmd = [sys.executable, "-m", "metaagent.cli.train", "--config", "tiny", "--model", REPO, "--steps", "1",
           "--out", str(out), "--quiet"]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert set(json.loads((out / "run.json").read_text())["models"].values()) == {REPO}
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if row["step"] >= 0] == [0]
