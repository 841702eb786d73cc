"""Model aliases, the conversion cache and its tokenizer fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from metaagent.policy import models


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("METAAGENT_CACHE", str(tmp_path / "c"))
    assert models.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("METAAGENT_CACHE")
    assert models.cache_dir() == Path.home() / ".cache" / "metaagent"


def test_import_policy_package_does_not_import_torch():
    code = (
        "import sys, metaagent.policy\n"
        "heavy = [m for m in ('torch', 'transformers', 'openai', 'vllm') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_unknown_model_path_names_path_and_fix(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError) as err:
        models.resolve_model(str(missing))
    msg = str(err.value)
    assert str(missing) in msg and "config.json" in msg and "embedded" in msg and "tiny" in msg


def test_hub_id_gives_clear_error_not_hub_trace(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # an empty cache, offline: never a download here
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="HuggingFaceTB/SmolLM2-360M-Instruct") as err:
        models.resolve_model("HuggingFaceTB/SmolLM2-360M-Instruct")
    assert "\n" not in str(err.value) and "HF_HUB_OFFLINE" in str(err.value)


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(FileNotFoundError, match="without config.json"):
        models.resolve_model(str(tmp_path))


def test_broken_model_directory_error_names_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))  # no weights
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        models.load_model_and_tokenizer(str(tmp_path))


def test_bad_dtype():
    with pytest.raises(ValueError, match="dtype must be one of"):
        models.torch_dtype("float64")


def test_tiny_model_shape_and_fixed_tokenizer():
    model, tok = models.load_model_and_tokenizer("tiny")
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (
        64,
        2,
        4,
        2,
    )
    assert cfg.intermediate_size == 128 and cfg.tie_word_embeddings
    assert cfg.vocab_size == len(tok) == 49152  # the embedded vocabulary, no tokens added
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id == 0
    assert model.generation_config.eos_token_id == 2 and model.generation_config.pad_token_id == 0
    # the ChatML template ends each turn with the eos token the model must stop on
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|im_start|>assistant\n") and "hi<|im_end|>" in text


def test_tiny_model_is_reproducible():
    """Same weights on every build: a fixed seed, independent of the global RNG state."""
    import torch

    a, _ = models.load_model_and_tokenizer("tiny")
    torch.manual_seed(999)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(models.TINY_SEED)
        from transformers import LlamaForCausalLM

        b = LlamaForCausalLM(a.config)
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(pa, pb), name


def test_concurrent_builds_run_the_builder_once(monkeypatch, tmp_path):
    """Threads racing to build an alias: one build, every caller gets the finished directory."""
    monkeypatch.setenv("METAAGENT_CACHE", str(tmp_path))
    calls = []

    def fake_build(out: Path) -> None:
        calls.append(out)
        threading.Event().wait(0.2)  # long enough for the others to queue on the lock
        (out / "config.json").write_text("{}")

    monkeypatch.setitem(models._BUILDERS, models.TINY, fake_build)
    results, errors = [], []

    def build():
        try:
            results.append(models.resolve_model("tiny"))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(calls) == 1
    assert len(set(results)) == 1 and (Path(results[0]) / "config.json").is_file()
    leftovers = [p.name for p in (tmp_path / "models").iterdir() if ".tmp-" in p.name]
    assert leftovers == []


def test_failed_build_leaves_no_partial_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("METAAGENT_CACHE", str(tmp_path))

    def failing_build(out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise RuntimeError("conversion crashed")

    monkeypatch.setitem(models._BUILDERS, models.TINY, failing_build)
    with pytest.raises(RuntimeError, match="conversion crashed"):
        models.resolve_model("tiny")
    assert [p.name for p in (tmp_path / "models").iterdir() if not p.name.endswith(".lock")] == []


def test_stale_build_version_is_rebuilt(monkeypatch, tmp_path):
    monkeypatch.setenv("METAAGENT_CACHE", str(tmp_path))
    stale = tmp_path / "models" / models.CACHE_NAMES[models.TINY]
    stale.mkdir(parents=True)
    (stale / models.BUILD_MARKER).write_text(json.dumps({"version": models.BUILD_VERSION - 1}))
    monkeypatch.setitem(models._BUILDERS, models.TINY, lambda out: (out / "config.json").write_text("{}"))
    path = Path(models.resolve_model("tiny"))
    assert path == stale and (path / "config.json").is_file()
    assert json.loads((path / models.BUILD_MARKER).read_text())["version"] == models.BUILD_VERSION


@pytest.mark.slow
def test_two_processes_build_tiny_into_fresh_cache(tmp_path):
    """Real conversion race: two processes build the tiny model into an empty cache at the same time."""
    env = {**os.environ, "METAAGENT_CACHE": str(tmp_path)}
    code = "from metaagent.policy.models import load_model_and_tokenizer as l; m, t = l('tiny'); print(t.eos_token)"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert out.strip().endswith("<|im_end|>")
    entries = sorted(p.name for p in (tmp_path / "models").iterdir() if not p.name.endswith(".lock"))
    assert entries == [models.CACHE_NAMES[models.TINY]]


@pytest.mark.slow
def test_embedded_model_tokenizer_fix():
    model, tok = models.load_model_and_tokenizer("embedded")
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2 and tok.pad_token_id == 0
    assert model.config.vocab_size == len(tok) == 49152
    assert getattr(model.config, "quantization_config", None) is None
    assert model.config.num_hidden_layers == 30
