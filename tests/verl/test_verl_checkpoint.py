"""verl-backend checkpoints in the run directory, and their conversion to Hugging Face (CPU).

The FSDP shards themselves are written by verl's workers on GPUs; here a fake group writes the files verl's
FSDPCheckpointManager writes for one rank (``model_world_size_1_rank_0.pt``, ``fsdp_config.json``,
``huggingface/``), so the conversion runs verl's real merger end to end.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from builders import VOCAB, tiny_llama

from metaagent.learn.checkpoint import CheckpointError, latest_checkpoint, save_checkpoint
from metaagent.train.verl_backend.checkpoint import (
    load_verl_checkpoint,
    save_verl_checkpoint,
    verl_model_dirs,
)
from metaagent.train.verl_backend.convert import main as convert_main
from metaagent.train.verl_backend.convert import sources, targets

ROOT = Path(__file__).resolve().parents[2]


def word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w1"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w1", pad_token="w0", eos_token="w2")


class FakeGroup:
    """Writes what verl's FSDP checkpoint manager writes for world size 1; records loads."""

    def __init__(self, seed: int) -> None:
        self.model = tiny_llama(seed)
        self.model.config.architectures = [
            "LlamaForCausalLM"
        ]  # as in a config loaded from a pretrained model
        self.loaded: list[Path] = []

    def save(self, path: Path, step: int) -> None:
        torch.save(self.model.state_dict(), path / "model_world_size_1_rank_0.pt")
        torch.save({"step": step}, path / "optim_world_size_1_rank_0.pt")
        (path / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
        self.model.config.save_pretrained(path / "huggingface")
        word_tokenizer().save_pretrained(path / "huggingface")

    def load(self, path: Path) -> None:
        self.loaded.append(path)


def test_save_and_resume_in_the_run_layout(tmp_path):
    groups = {"designer": FakeGroup(0), "executor": FakeGroup(1)}
    random.seed(5)
    path = save_verl_checkpoint(tmp_path, 30, groups=groups, state={"next_step": 30, "sampler": {"pos": 3}})
    assert path == tmp_path / "checkpoints" / "step_00000030"
    assert latest_checkpoint(tmp_path) == path  # the local backend's listing finds it
    meta = json.loads((path / "meta.json").read_text())
    assert meta["backend"] == "verl" and meta["step"] == 30
    assert meta["models"] == {"designer": "verl/designer", "executor": "verl/executor"}
    assert (path / "verl" / "executor" / "model_world_size_1_rank_0.pt").is_file()
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))

    expected = random.random()
    random.seed(99)
    fresh = {"designer": FakeGroup(0), "executor": FakeGroup(1)}
    state = load_verl_checkpoint(path, groups=fresh)
    assert state["next_step"] == 30 and state["sampler"] == {"pos": 3} and state["step"] == 30
    assert fresh["designer"].loaded == [path / "verl" / "designer"]
    assert random.random() == expected  # RNG states restored


def test_a_failed_save_leaves_no_checkpoint(tmp_path):
    class Broken(FakeGroup):
        def save(self, path, step):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_verl_checkpoint(tmp_path, 3, groups={"policy": Broken(0)}, state={})
    assert latest_checkpoint(tmp_path) is None
    assert not list((tmp_path / "checkpoints").iterdir())


def test_local_backend_checkpoints_are_not_mistaken_for_verl_ones(tmp_path):
    local = save_checkpoint(tmp_path, 1, models={"policy": tiny_llama()}, state={})
    with pytest.raises(CheckpointError, match="already\\s+Hugging Face"):
        verl_model_dirs(local)
    with pytest.raises(CheckpointError, match="neither"):
        sources(tmp_path)


def test_convert_a_checkpoint_to_a_loadable_hugging_face_model(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    group = FakeGroup(seed=3)
    ckpt = save_verl_checkpoint(tmp_path / "run", 6, groups={"policy": group}, state={})
    out = tmp_path / "hf"
    assert targets(sources(ckpt), out) == {"policy": out}  # one model: OUT is the model folder
    assert convert_main([str(ckpt), str(out)]) == 0

    model = AutoModelForCausalLM.from_pretrained(out)
    assert AutoTokenizer.from_pretrained(out).convert_tokens_to_ids("w5") == 5
    original = group.model.state_dict()
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(
            tensor.float(), original[name].to(torch.bfloat16).float(), atol=0, rtol=0, msg=name
        )


def test_convert_cli_refuses_a_non_checkpoint(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "metaagent.train.verl_backend.convert", str(tmp_path), str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 2 and "neither a metaagent checkpoint" in r.stderr


def test_several_models_convert_into_one_folder_each(tmp_path):
    ckpt = save_verl_checkpoint(
        tmp_path, 2, groups={"designer": FakeGroup(0), "executor": FakeGroup(1)}, state={}
    )
    assert targets(sources(ckpt), tmp_path / "o") == {
        "designer": tmp_path / "o" / "designer",
        "executor": tmp_path / "o" / "executor",
    }
    assert sources(ckpt, "executor") == {"executor": ckpt / "verl" / "executor"}
    with pytest.raises(CheckpointError, match="no model 'critic'"):
        sources(ckpt, "critic")
