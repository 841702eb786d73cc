"""LoRA RL (policy.lora): one adapter per role on one shared base, the stage's role trains only its adapter,
each role's rollout runs its own adapter, checkpoints hold adapters and resume exactly, and the merged export
loads as --model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from builders import random_samples

from metaagent.config import ConfigError
from metaagent.policy.base import ChatRequest, SamplingParams
from metaagent.train.config import LoraSettings, OptimConfig, PolicyConfig, TrainConfig
from metaagent.train.local.models import load_models, make_updaters
from metaagent.train.local.lora import LoraError
from metaagent.train.local.update import update_routed

LORA = LoraSettings(enabled=True, rank=4, alpha=8.0)


def _separate(model: str = "tiny") -> PolicyConfig:
    return PolicyConfig(model=model, weights="separate", lora=LORA, max_batch_size=4, prefix_cache_mb=0)


def _snapshot(models) -> dict[str, torch.Tensor]:
    (aset,) = {id(a): a for a in models.adapters.values()}.values()
    return {n: p.detach().clone() for n, p in aset.peft.named_parameters()}


def _greedy(policy, text: str = "Say something.") -> list[float]:
    req = ChatRequest([{"role": "user", "content": text}], SamplingParams(temperature=0.0, max_tokens=6, seed=1))
    (c,) = policy.generate([req])
    return c.logprobs


def test_executor_stage_changes_only_the_executor_adapter():
    models = load_models(_separate())
    try:
        assert set(models.adapters) == {"designer", "executor"}
        assert models.adapters["designer"] is models.adapters["executor"]  # one base, two adapters
        assert models.models["designer"] is models.models["executor"]
        updaters = make_updaters(models, OptimConfig(lr=1e-2))
        n_designer = sum(p.numel() for p in updaters["designer"].params)
        n_all = sum(p.numel() for p in models.models["executor"].parameters())
        assert 0 < n_designer < n_all / 10  # the optimizer holds the adapter only
        before = _snapshot(models)
        designer_lp, executor_lp = _greedy(models.designer), _greedy(models.executor())
        assert designer_lp == executor_lp  # LoRA's B starts at 0: both adapters are the base at first

        samples = random_samples(6, seed=0, roles=("designer", "executor"))
        metrics = update_routed(updaters, samples, models.role_to_key, active_roles={"executor"})
        assert metrics["train/executor/skipped_step"] == 0.0 and metrics["train/designer/samples"] == 0.0
        models.weights_changed()
        after = _snapshot(models)
        changed = {n for n in before if not torch.equal(before[n], after[n])}
        assert changed and all(".executor." in n for n in changed)  # only executor LoRA weights moved
        assert not any(".designer." in n or "lora_" not in n for n in changed)

        # each role's rollout runs its own adapter: the designer generates exactly as before, the executor not
        assert _greedy(models.designer) == designer_lp
        assert _greedy(models.executor()) != executor_lp
    finally:
        models.close()


def _initial_adapters(seed: int) -> dict[str, torch.Tensor]:
    models = load_models(_separate(), seed=seed)
    try:
        return {n: t.clone() for n, t in _snapshot(models).items() if "lora_" in n}
    finally:
        models.close()


def test_adapter_init_follows_the_run_seed(monkeypatch):
    """peft draws lora_A from torch's generator: each adapter starts from the weights of (trainer.seed, its key),
    bit for bit whatever was drawn before, and the generator outside is left as it was."""
    from metaagent.policy.models import load_model_and_tokenizer
    from metaagent.train.local.lora import AdapterSet

    first = _initial_adapters(0)
    torch.rand(17)  # other draws before the load
    again, other = _initial_adapters(0), _initial_adapters(1)
    lora_a = [n for n in first if ".lora_A." in n]
    assert lora_a and first.keys() == again.keys() == other.keys()
    assert all(torch.equal(first[n], again[n]) for n in first)  # the same seed: bit-identical adapters
    assert all(not torch.equal(first[n], other[n]) for n in lora_a)  # another seed: other ones
    designer = next(n for n in lora_a if ".designer." in n)
    assert not torch.equal(first[designer], first[designer.replace(".designer.", ".executor.")])  # per key

    base, _ = load_model_and_tokenizer("tiny", dtype="float32")
    state = torch.random.get_rng_state()
    AdapterSet(base, ["policy"], LORA, "tiny", seed=0)
    assert torch.equal(torch.random.get_rng_state(), state)  # the draws outside the adapters' init unchanged

    from metaagent.train.local import backend as local_backend
    from metaagent.train.local import models as local_models

    seen = {}
    monkeypatch.setattr(local_models, "load_models", lambda cfg, seed: seen.setdefault("seed", seed) and None)
    monkeypatch.setattr(local_models, "make_updaters", lambda *a, **k: {})
    run = local_backend.LocalBackend(TrainConfig.load("tiny", ["trainer.seed=7"]))
    run.start(SimpleNamespace(ref_logprobs=False, values=False))
    assert seen == {"seed": 7}  # the local backend seeds them with trainer.seed


def test_shared_weights_train_one_adapter_and_verl_mapping():
    from metaagent.train.roles import model_plan

    cfg = PolicyConfig(model="tiny", lora=LORA)
    assert list(model_plan(cfg)[0]) == ["policy"]
    t = TrainConfig.load(None, ["policy.lora.enabled=true", "policy.lora.rank=8", "policy.lora.alpha=16"])
    assert (t.policy.lora.rank, t.policy.lora.alpha, t.policy.lora.target_modules) == (8, 16.0, "all-linear")
    assert TrainConfig.load(None, []).policy.lora.enabled is False  # off by default
    with pytest.raises(ConfigError, match="one adapter per role .* runs on the local backend only"):
        TrainConfig.load(None, ["trainer.backend=verl", "policy.lora.enabled=true", "policy.weights=separate"])


def test_verl_keys_of_one_adapter():
    from metaagent.train.verl_backend.plan import resolve_plan
    from metaagent.train.verl_backend.verl_config import metaagent_settings

    cfg = TrainConfig.load("tiny_verl_cpu", ["policy.lora.enabled=true", "policy.lora.rank=8", "policy.lora.alpha=16"])
    plan = resolve_plan(cfg)
    s = metaagent_settings(cfg, plan, plan.models[0])
    ar = "actor_rollout_ref.model"
    assert (s[f"{ar}.lora_rank"], s[f"{ar}.lora_alpha"], s[f"{ar}.target_modules"]) == (8, 16, "all-linear")


# ---- checkpoints and export (resume on the trainer: tests/train/test_trainer_run.py, with LoRA) ------------


def test_adapter_checkpoint_round_trip_and_merged_export_loads(tmp_path):
    from peft import PeftModel

    from metaagent.policy.models import load_model_and_tokenizer, resolve_model

    models = load_models(_separate())
    try:
        aset = models.adapters["executor"]
        torch.manual_seed(0)
        with torch.no_grad():  # a trained-looking executor adapter (B != 0)
            for p in aset.parameters("executor"):
                p.add_(torch.randn_like(p) * 0.05)
        trained = {k: v.clone() for k, v in aset.state_dict("executor").items()}
        ckpt = aset.save("executor", tmp_path / "executor")
        cfg = json.loads((ckpt / "adapter_config.json").read_text())
        assert cfg["r"] == 4 and cfg["base_model_name_or_path"] == "tiny" and not (ckpt / "model.safetensors").exists()
        with torch.no_grad():
            for p in aset.parameters("executor"):
                p.zero_()
        aset.load("executor", ckpt)
        assert all(torch.equal(trained[k], v) for k, v in aset.state_dict("executor").items())  # exact
        with pytest.raises(LoraError, match="not an adapter checkpoint"):
            aset.load("designer", tmp_path)
    finally:
        models.close()

    # metaagent-export merges it into a full model folder equal to base + adapter
    merged = tmp_path / "merged"
    cmd = [sys.executable, "-m", "metaagent.cli.export", str(ckpt), "--out", str(merged)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    model, tok = load_model_and_tokenizer(str(merged))
    base, _ = load_model_and_tokenizer("tiny")
    ids = torch.tensor([tok("The answer is 3.")["input_ids"]])
    with torch.no_grad():
        plain = base(ids).logits
        ref = PeftModel.from_pretrained(base, str(ckpt))(ids).logits
        out = model(ids).logits
    assert torch.allclose(out, ref, atol=1e-5) and not torch.allclose(out, plain, atol=1e-3)
    assert (Path(resolve_model(str(ckpt))) / "config.json").is_file()  # --model ADAPTER works directly
    again = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert again.returncode == 1 and again.stderr.strip().count("\n") == 0 and "exists" in again.stderr
    bad = subprocess.run([*cmd[:3], str(tmp_path), "--out", str(tmp_path / "x")], capture_output=True, text=True)
    assert bad.returncode == 1 and "no adapter_config.json" in bad.stderr
