"""The bodies of ``scripts/gpu_check.py``'s in-process stages, each run in its own child process:

    python scripts/gpu_check_stages.py env|models|verl-engine --device cuda --out DIR [--model DIR] [--tiny]

Each prints its result as the last line, ``GPUCHECK_RESULT {"status": PASS|FAIL|SKIPPED, "reason": ..., "details":
{...}}``; anything it raises is a FAIL with the traceback in the stage's log (the orchestrator's).

- ``env``: driver, GPU, torch / CUDA / NCCL, the versions of the packages the check touches, and whether the local
  training path imports (it needs neither Ray nor verl).
- ``models``: the two models the training stages use, as folders under ``OUT/models``: ``tiny`` (the tiny random
  Llama of :data:`metaagent.policy.models.TINY_CONFIG`) and ``shape`` (``--model`` itself when it holds weights;
  else a random model of its ``config.json``: SmolLM2-135M's shape from a weightless copy; with ``--tiny`` a
  2-layer model of that config). Without ``--model`` the ``tiny`` and ``embedded`` aliases (the embedded GGUF).
- ``verl-engine``: verl's real FSDP engine (``ActorRolloutRefWorker`` through metaagent's ``ModelGroup``) on the
  device, the Hugging Face policy as the rollout (``verl.rollout_name=hf``; on CPU ``verl.device=cpu``): two
  updates with fixed advantages of opposite signs, checking that verl's log-probs equal the rollout's before the
  first update (bf16 on CUDA: measured, not asserted tight), that each update moves the log-probs with the
  advantages, that the rollout's weights equal the actor's after the sync, and a checkpoint save/load.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

RESULT = "GPUCHECK_RESULT"
#: the folder the setup stage installed --wheels into (set by scripts/gpu_check.py)
SITE_ENV = "GPUCHECK_SITE"
#: distributions whose versions the env stage reports (absent ones as null)
PACKAGES = (
    "torch", "transformers", "tokenizers", "accelerate", "peft", "safetensors", "numpy", "verl", "ray", "vllm",
    "flash-attn", "tensordict", "pydantic", "libcst", "RestrictedPython", "math-verify", "sympy", "pytest",
)  # fmt: skip
#: weight files that make a model folder a real model (else the models stage builds random weights)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
#: the shape of the --tiny stand-in for the 135M model (a real config, shrunk: its random-init path runs)
TINY_SHAPE = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2}  # fmt: skip


def result(status: str, reason: str = "", **details) -> dict:
    return {"status": status, "reason": reason, "details": details}


def version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


# ---- env -------------------------------------------------------------------------------------------------------


def stage_env(args) -> dict:
    smi = shutil.which("nvidia-smi")
    driver = None
    if smi:
        q = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)  # fmt: skip
        driver = q.stdout.strip() or q.stderr.strip()
    import torch

    cuda = torch.cuda.is_available()
    gpu = {}
    if cuda:
        props = torch.cuda.get_device_properties(0)
        gpu = {
            "name": props.name, "capability": f"{props.major}.{props.minor}", "memory_gib": round(props.total_memory / 2**30, 1),
            "count": torch.cuda.device_count(), "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else None,
            "bf16": torch.cuda.is_bf16_supported(),
        }  # fmt: skip
    t0 = time.perf_counter()
    import metaagent.cli.train  # noqa: F401  the local training path
    import metaagent.train.local  # noqa: F401

    details = {
        "python": platform.python_version(), "platform": platform.platform(), "nvidia_smi": driver, "gpu": gpu,
        "torch": torch.__version__, "versions": {p: version(p) for p in PACKAGES},
        "local_path_import_s": round(time.perf_counter() - t0, 2),
        "ray_or_verl_imported": sorted(m for m in sys.modules if m.split(".")[0] in ("ray", "verl")),
        "from_wheels": from_wheels(os.environ.get(SITE_ENV)),
    }  # fmt: skip
    if args.device == "cuda" and not cuda:
        return result("FAIL", f"torch {torch.__version__} sees no CUDA device (nvidia-smi: {driver or 'not found'})", **details)
    if details["ray_or_verl_imported"]:
        return result("FAIL", "importing the local training path imported ray/verl", **details)
    return result("PASS", **details)


def from_wheels(site: str | None) -> dict[str, str]:
    """Distribution -> version of what the setup stage installed (``--wheels``) and this process uses."""
    if not site:
        return {}
    return {d.metadata["Name"]: d.version for d in importlib.metadata.distributions(path=[site])}


# ---- models ----------------------------------------------------------------------------------------------------


def _random_model(config, tokenizer, out: Path, seed: int) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    from metaagent.policy.models import fix_chat_tokens

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).to(torch.float32)
    fix_chat_tokens(tokenizer, model)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return model.num_parameters()


def stage_models(args) -> dict:
    from transformers import AutoConfig, AutoTokenizer, LlamaConfig

    from metaagent.policy.models import TINY_CONFIG, TINY_SEED, fix_chat_tokens, resolve_model

    root = Path(args.out) / "models"
    root.mkdir(parents=True, exist_ok=True)
    details: dict = {}
    if args.model:
        source = Path(args.model)
        if not (source / "config.json").is_file():
            return result("FAIL", f"--model {source} has no config.json (give an HF model folder; weights optional)")
        tokenizer = AutoTokenizer.from_pretrained(source)
        if tokenizer.pad_token is None:
            fix_chat_tokens(tokenizer)
        tiny = root / "tiny"
        if not (tiny / "config.json").is_file():
            config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **TINY_CONFIG)  # fmt: skip
            details["tiny_params"] = _random_model(config, tokenizer, tiny, TINY_SEED)
        details["tiny"] = str(tiny)
        has_weights = any((source / f).is_file() for f in WEIGHT_FILES)
        if has_weights and not args.tiny:
            details.update(shape=str(source), shape_random=False)
        else:
            shape = root / "shape"
            config = AutoConfig.from_pretrained(source)
            if args.tiny:
                for k, v in TINY_SHAPE.items():
                    setattr(config, k, v)
            if not (shape / "config.json").is_file():
                details["shape_params"] = _random_model(config, tokenizer, shape, TINY_SEED + 1)
            details.update(shape=str(shape), shape_random=True)
    else:
        details["tiny"] = resolve_model("tiny")  # the alias: builds from the embedded GGUF once
        if args.tiny:
            shape = root / "shape"
            config = AutoConfig.from_pretrained(details["tiny"])
            if not (shape / "config.json").is_file():
                tokenizer = AutoTokenizer.from_pretrained(details["tiny"])
                details["shape_params"] = _random_model(config, tokenizer, shape, TINY_SEED + 1)
            details.update(shape=str(shape), shape_random=True)
        else:
            details.update(shape=resolve_model("embedded"), shape_random=False)  # SmolLM2-135M-Instruct itself
    cfg = AutoConfig.from_pretrained(details["shape"])
    details["shape_config"] = {k: getattr(cfg, k, None) for k in ("num_hidden_layers", "hidden_size", "vocab_size")}
    (root / "models.json").write_text(json.dumps(details, indent=1))
    return result("PASS", **details)


# ---- verl engine -----------------------------------------------------------------------------------------------


def stage_verl_engine(args) -> dict:
    missing = [m for m in ("verl", "ray") if importlib.util.find_spec(m) is None]
    if missing:
        return result("SKIPPED", f"{' and '.join(missing)} not installed (pip install verl ray, or --wheels)")
    models = json.loads((Path(args.out) / "models" / "models.json").read_text())
    device = args.device
    work = Path(args.out) / "verl_engine"
    shutil.rmtree(work, ignore_errors=True)
    overrides = [
        f"policy.model={models['tiny']}", "trainer.backend=verl", f"trainer.out={work}/run", "verl.n_gpus_per_node=1",
        f"verl.device={device}", "verl.rollout_name=hf", "verl.logprob_check=true", "optim.lr=1e-3",
        "optim.max_prompt_tokens=256", "optim.max_response_tokens=32", "policy.max_batch_size=8",
    ]  # fmt: skip
    from metaagent.train.config import TrainConfig
    from metaagent.train.verl_backend.cpu import HFRollout, activate, cpu_pool
    from metaagent.train.verl_backend.plan import resolve_plan
    from metaagent.train.verl_backend.verl_config import compose_verl_config

    cfg = TrainConfig.load("tiny", overrides)
    plan = resolve_plan(cfg)
    env = activate(plan.verl.device, plan.verl.hf_rollout)
    import ray
    import torch
    from transformers import AutoTokenizer
    from metaagent.policy import ChatRequest, SamplingParams
    from metaagent.learn.samples import Sample
    from metaagent.train.verl_backend.batch import build_update_batch
    from metaagent.train.verl_backend.workers import ModelGroup

    times: dict[str, float] = {}

    def timed(name, fn, *a, **k):
        t = time.perf_counter()
        out = fn(*a, **k)
        times[name] = round(time.perf_counter() - t, 2)
        return out

    mp = plan.models[0]
    verl_cfg = compose_verl_config(cfg, plan, mp, run_dir=str(work / "run"))
    env = {**env, "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "TOKENIZERS_PARALLELISM": "false"}
    timed("ray_init", ray.init, runtime_env={"env_vars": env}, include_dashboard=False,
          **({"num_cpus": 2} if device == "cpu" else {}))  # fmt: skip
    try:
        tok = AutoTokenizer.from_pretrained(mp.path)
        group = ModelGroup(mp, verl_cfg, plan.verl, tok, seed=0)
        timed("start", group.start, pool=cpu_pool(mp.gpus) if device == "cpu" else None, device_name=device,
              rollout=lambda g, pool: HFRollout(g, max_batch_size=8, device=device))  # fmt: skip
        timed("sync_0", group.sync_weights, 0)
        policy = group.policy
        requests = [ChatRequest([{"role": "user", "content": f"What is {i} + {2 * i}?"}],
                                SamplingParams(max_tokens=16, temperature=1.0, seed=i)) for i in range(4)]  # fmt: skip
        completions = timed("rollout", policy.generate, requests)
        adv = [1.0, -1.0, 1.0, -1.0]
        samples = [Sample("executor", c.prompt_ids, c.response_ids, list(c.logprobs), advantage=a, temperature=1.0,
                          agent="a", key=(0, i), task_id=f"t{i}") for i, (c, a) in enumerate(zip(completions, adv))]  # fmt: skip

        report: dict = {"device": device, "strategy": verl_cfg.actor_rollout_ref.actor.strategy}
        moved, synced = [], []
        for step in (0, 1):
            batch = build_update_batch(samples, dp_size=group.dp_size, pad_id=group.pad_id)
            data = batch.data.batch
            mask = data["response_mask"].bool()
            before = timed(f"log_prob_{step}", group.actor_log_probs, batch)
            if step == 0:
                report["logprob_diff_max_verl_vs_rollout"] = float(((before - data["old_log_probs"]).abs() * mask).max())
            group.free_rollout_memory()
            metrics = timed(f"update_{step}", group.update, batch, step=step)
            report[f"update_{step}"] = {k.split("/")[-1]: round(float(v), 6) for k, v in metrics.items()
                                        if k.split("/")[-1] in ("pg_loss", "grad_norm", "ppo_kl", "rollout_logprob_diff_max")}  # fmt: skip
            after = group.actor_log_probs(batch)
            delta = ((after - before) * mask).sum(-1) / mask.sum(-1)  # (B,) mean log-prob change per response
            moved.append(bool((torch.sign(delta) == torch.sign(data["advantages"][:, 0])).all()))
            timed(f"sync_{step + 1}", group.sync_weights, step + 1)
            synced.append(float(((rollout_log_probs(group.rollout.model, data) - after).abs() * mask).max()))
        report["moved_with_the_advantages"] = moved
        report["logprob_diff_max_rollout_after_sync_vs_verl"] = synced
        ckpt = work / "ckpt"
        timed("save", group.save, str(ckpt), 2)
        timed("load", group.load, str(ckpt))
        report["checkpoint_files"] = sorted(p.name for p in ckpt.iterdir())
        if device == "cuda":
            report["driver_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        report["seconds"] = times
        group.close()
    finally:
        ray.shutdown()
    tol = 1e-4 if device == "cpu" else 0.5  # bf16 engine vs an fp32 rollout: reported; only a gross error fails
    if not all(moved):
        return result("FAIL", f"an update did not move the log-probs with the advantages: {moved}", **report)
    worst = max(report["logprob_diff_max_verl_vs_rollout"], *report["logprob_diff_max_rollout_after_sync_vs_verl"])
    if not worst <= tol:
        return result("FAIL", f"verl's log-probs are up to {worst:.3g} from the rollout's (tolerance {tol})", **report)
    return result("PASS", **report)


def rollout_log_probs(model, data) -> Any:
    """The rollout model's log-probs of the batch's responses (a full forward), ``(B, R)`` fp32."""
    import torch

    device = next(model.parameters()).device
    ids = data["input_ids"].to(device)  # (B, P + R), left-padded prompt then right-padded response
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=data["attention_mask"].to(device),
                       position_ids=data["position_ids"].to(device)).logits.float()  # fmt: skip
    r = data["responses"].shape[1]
    lp = torch.log_softmax(logits[:, -r - 1 : -1], -1).gather(-1, ids[:, -r:, None]).squeeze(-1)
    return lp.cpu() * data["response_mask"]


STAGES = {"env": stage_env, "models": stage_models, "verl-engine": stage_verl_engine}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=sorted(STAGES))
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--out", required=True)
    p.add_argument("--model")
    p.add_argument("--tiny", action="store_true")
    args = p.parse_args()
    try:
        out = STAGES[args.stage](args)
    except Exception as e:  # the stage failed: its traceback goes to the log, its reason to the summary
        traceback.print_exc()
        out = result("FAIL", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
    print(f"{RESULT} {json.dumps(out, default=str)}", flush=True)


if __name__ == "__main__":
    main()
