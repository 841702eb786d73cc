"""One local-backend training step on a device (CUDA or CPU), phase by phase, beside a raw batched generate of
the same tokens on the same device.

    python benchmarks/gpu_step.py --device cuda [--config tiny] [--model DIR] [--set key=value ...] [--json OUT]

1. ``TrainLoop.train_step(0)`` of ``--config`` with ``policy.device``: the metrics' phase times (designer
   generation, executions with their agent calls and sandbox, update) and peak device memory per phase.
2. "The limit": the step's designer and agent-call tokens generated again by the bare model
   (``transformers`` forward passes with its KV cache, no metaagent code): prompts left-padded into batches of
   ``policy.max_batch_size`` (sorted by length), one prefill, then one forward per position, each row forced
   through its recorded response (a ``log_softmax`` over the vocabulary per step stands in for the sampling),
   a row's padding continuing until its batch's longest response ends (static batching). Same device, same
   dtype, a fresh copy of the weights.

Printed and written (``--json``): seconds of each phase, the raw generate's seconds for the same tokens, and
``raw / actual`` (1.0: the step generates as fast as the bare batched forward loop; above 1: faster, e.g. the
policy's own KV cache and prefix reuse beat transformers' per-call overhead; the executions also wait on the
sandbox, so their ratio is a lower bound of the generation's). Side by side in one process, so the ratio holds
on a shared machine; seconds do not. Independent of :mod:`metaagent.policy.hf`'s internals, so it measures
whatever decode loop the policy has.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import metaagent  # noqa: F401  (before torch: passive OpenMP waiting, see metaagent/__init__.py)


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def raw_generate(model, pairs: list[tuple[list[int], list[int]]], *, batch_size: int, pad_id: int, device: str) -> float:
    """Seconds for ``model`` to run prefill + forced decode of ``pairs`` (prompt ids, response ids) in static
    batches (module docstring)."""
    import torch

    rows = sorted((p, r) for p, r in pairs if r)
    synchronize(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(rows), batch_size):
            chunk = rows[i : i + batch_size]
            width = max(len(p) for p, _ in chunk)
            ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p, _ in chunk], device=device)  # (b, P)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in chunk], device=device)  # (b, P)
            pos = (mask.cumsum(-1) - 1).clamp(min=0)  # (b, P)
            out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1]  # (b, V)
            steps = max(len(r) for _, r in chunk)
            forced = torch.tensor([list(r) + [pad_id] * (steps - len(r)) for _, r in chunk], device=device)  # (b, R)
            for t in range(steps):
                torch.log_softmax(logits.float(), dim=-1)  # the per-step work of sampling with log-probs
                if t == steps - 1:
                    break
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                pos = pos[:, -1:] + 1
                out = model(input_ids=forced[:, t : t + 1], attention_mask=mask, position_ids=pos,
                            past_key_values=cache, use_cache=True)  # fmt: skip
                cache, logits = out.past_key_values, out.logits[:, -1]
    synchronize(device)
    return time.perf_counter() - t0


def step_vs_raw(cfg) -> dict:
    """Run ``TrainLoop.train_step(0)`` of ``cfg``, then the raw generate of its tokens; the numbers as a dict."""
    from metaagent.policy.models import load_model_and_tokenizer
    from metaagent.train.loop import TrainLoop

    device = cfg.policy.device
    with TrainLoop(cfg) as trainer:
        synchronize(device)
        result = trainer.train_step(0)
        synchronize(device)
    m, trees = result.metrics, result.trees
    designer = [(d.sample.prompt_ids, d.sample.response_ids) for t in trees for d in t.designs if d.sample]
    agents = [
        (turn.prompt_ids, turn.response_ids)
        for t in trees for _, e in t.executions() for turn in e.turns if not turn.synthetic and turn.response_ids
    ]  # fmt: skip
    model, tok = load_model_and_tokenizer(cfg.policy.model, dtype=cfg.policy.dtype, device=device)
    raw = lambda pairs: raw_generate(model, pairs, batch_size=cfg.policy.max_batch_size, pad_id=tok.pad_token_id, device=device)  # noqa: E731
    for prompt, _ in (designer or agents)[:1]:
        raw([(prompt, [tok.pad_token_id])])  # warm-up: kernels, allocator
    raw_designer, raw_agents = raw(designer), raw(agents)
    design_s = m["time/design_s"]
    executions_s = m["time/rollout_s"] - design_s
    out = {
        "model": cfg.policy.model,
        "device": device,
        "designs": len(designer),
        "designer_tokens": sum(len(r) for _, r in designer),
        "agent_calls": len(agents),
        "agent_tokens": sum(len(r) for _, r in agents),
        "samples": {k.split("/")[-1]: m[k] for k in ("samples/designer", "samples/executor") if k in m},
        "seconds": {"designer_generation": design_s, "executions": executions_s, "update": m["time/update_s"],
                    "step": m["time/step_s"]},  # fmt: skip
        "raw_seconds": {"designer_generation": raw_designer, "executions": raw_agents},
        "peak_mib": {k.split("/")[-1]: v for k, v in m.items() if k.startswith("memory/")},
        "loss": m.get("train/loss"),
    }
    tokens = {"designer_generation": out["designer_tokens"], "executions": out["agent_tokens"]}
    out["raw_over_actual"] = {  # None for a phase that generated nothing (e.g. no valid design: no agent calls)
        k: (out["raw_seconds"][k] / out["seconds"][k] if tokens[k] and out["seconds"][k] > 0 else None)
        for k in out["raw_seconds"]
    }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="tiny")
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", help="policy.model (default: the config's)")
    p.add_argument("--set", nargs="*", default=[], help="config overrides, e.g. rollout.frozen_designer=single_math")
    p.add_argument("--json", type=Path, help="also write the numbers here")
    args = p.parse_args()

    from metaagent.train.config import TrainConfig

    out_dir = tempfile.mkdtemp(prefix="metaagent-gpu-step-")
    overrides = [*args.set, f"policy.device={args.device}", f"trainer.out={out_dir}", "trainer.save_every=0",
                 "trainer.val_every=0", "trainer.tensorboard=false"]  # fmt: skip
    if args.model:
        overrides.append(f"policy.model={args.model}")
    numbers = step_vs_raw(TrainConfig.load(args.config, overrides))
    s, r, q = numbers["seconds"], numbers["raw_seconds"], numbers["raw_over_actual"]
    print(f"one training step of {numbers['model']} on {numbers['device']}: {numbers['designs']} designs "
          f"({numbers['designer_tokens']} tokens), {numbers['agent_calls']} agent calls ({numbers['agent_tokens']} "
          f"tokens), samples {numbers['samples']}, peak MiB {numbers['peak_mib'] or '-'}")  # fmt: skip
    print(f"{'phase':<24}{'step s':>10}{'raw s':>10}{'raw/step':>10}")
    for k in ("designer_generation", "executions"):
        ratio = f"{q[k]:>10.2f}" if q[k] is not None else f"{'-':>10}"
        print(f"{k:<24}{s[k]:>10.2f}{r[k]:>10.2f}{ratio}")
    print(f"{'update':<24}{s['update']:>10.2f}\n{'whole step':<24}{s['step']:>10.2f}")
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=1))


if __name__ == "__main__":
    main()
