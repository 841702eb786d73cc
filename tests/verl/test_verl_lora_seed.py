"""verl's LoRA adapter starts from weights the run's seed decides: the composed config gives the actor engine
``lora_seed(trainer.seed, model key)`` (as the local backend's adapters), and (slow, in a subprocess since the
plugin's patches are process-global) with the plugin loaded as verl loads it, verl's real
``FSDPEngine._build_lora_module`` on a tiny CPU model gives bit-identical adapters for one seed whatever torch
drew before, and other adapters for another seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from metaagent.seeding import lora_seed
from metaagent.train.config import TrainConfig
from metaagent.train.verl_backend.plan import resolve_plan
from metaagent.train.verl_backend.verl_config import compose_verl_config

ROOT = Path(__file__).resolve().parents[2]
LORA = ["policy.lora.enabled=true", "policy.lora.rank=4", "policy.lora.alpha=8"]


def engine_seed(*overrides: str) -> tuple[int, str]:
    cfg = TrainConfig.load("tiny_verl_cpu", list(overrides))
    plan = resolve_plan(cfg)
    vc = compose_verl_config(cfg, plan, plan.models[0], run_dir="/tmp/lora_seed")
    return int(vc.actor_rollout_ref.actor.fsdp_config.seed), plan.models[0].key


def test_the_actor_engine_seed_is_the_runs_lora_seed():
    seed, key = engine_seed(*LORA, "trainer.seed=7")
    assert seed == lora_seed(7, key)
    assert engine_seed(*LORA, "trainer.seed=8")[0] == lora_seed(8, key) != seed


@pytest.mark.slow
def test_verls_lora_build_draws_under_the_engine_seed():
    pytest.importorskip("verl")
    pytest.importorskip("ray")  # every verl import pulls ray
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "OMP_NUM_THREADS": "1",
    }
    r = subprocess.run(
        [sys.executable, __file__], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["tensors"] > 0, out
    assert out["same_seed_equal"] and out["other_seed_differs"], out


def main() -> None:
    from metaagent.train.verl_backend.cpu import activate

    activate("cpu")  # the plugin loaded as verl loads it in a worker, before verl's engine module
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    model_config = types.SimpleNamespace(lora_adapter_path=None, lora_rank=4, lora_alpha=8,
                                         target_modules=["q_proj", "v_proj"], target_parameters=None,
                                         exclude_modules=None)  # fmt: skip
    tiny = LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager")  # fmt: skip

    def adapter(seed: int) -> dict:
        engine = types.SimpleNamespace(engine_config=types.SimpleNamespace(seed=seed), model_config=model_config)
        base = LlamaForCausalLM(tiny)
        torch.rand(17)  # whatever the worker drew before must not matter
        peft = FSDPEngine._build_lora_module(engine, base)
        return {k: v.detach().clone() for k, v in peft.state_dict().items() if "lora_A" in k}

    first, again, other = adapter(3), adapter(3), adapter(4)
    print(json.dumps({
        "tensors": len(first),
        "same_seed_equal": first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first),
        "other_seed_differs": all(not torch.equal(first[k], other[k]) for k in first),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
