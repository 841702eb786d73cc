"""The local update's micro-batch size and recomputation mode, measured side by side (issue #63, item 4).

One policy update (:class:`~metaagent.train.local.update.PolicyUpdater`) of the embedded model (fp32 master
weights, this CPU's resolved ``optim.autocast``) on the peer benchmark's work: ``--samples`` 32 samples of
``--prompt-len`` prompt and ``--response-len`` response tokens (random ids, advantages +-1), for each
``optim.micro_batch_tokens`` in ``--tokens`` and each ``optim.recompute`` in ``--modes``. Every setting runs in a
fresh subprocess (one update from a fresh AdamW, as a run's first step), ``--rounds`` rounds in turn so load drift
hits every setting alike; per setting the median update seconds and the peak RSS of the process over its whole
life (``ru_maxrss``: the weights, AdamW's moments, the gradients and the update's activations), and the 1-minute
load average. The setting of least CPU time whose peak stays within ``--rss-limit-mib`` (0.6x TRL's peak on the
same step, ``benchmarks/peer_trl.py``) is marked: ``metaagent.learn.optim.UPDATE_DEFAULTS`` is read from it.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/update_modes.py [--tokens 768,3072,8192]
        [--modes off,selective,full] [--rounds 1] [--out benchmarks/results/update_modes_<kind>.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from statistics import median

import metaagent  # noqa: F401  (before torch: passive OpenMP waiting)


def worker(args) -> dict:
    """One update of one setting (module docstring)."""
    import torch

    from metaagent.learn.optim import autocast_dtype
    from metaagent.learn.samples import Sample
    from metaagent.policy.models import load_model_and_tokenizer
    from metaagent.train.local.update import PolicyUpdater

    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer("embedded", dtype="float32")
    model.train()
    rng = random.Random(0)
    vocab = model.config.vocab_size
    samples = [
        Sample(role="executor", prompt_ids=[rng.randrange(vocab) for _ in range(args.prompt_len)],
               response_ids=[rng.randrange(vocab) for _ in range(args.response_len)],
               old_logprobs=[-10.0] * args.response_len, advantage=1.0 if i % 2 else -1.0, temperature=1.0)
        for i in range(args.samples)
    ]  # fmt: skip
    updater = PolicyUpdater(
        model, lr=5e-6, micro_batch_tokens=args.micro_batch_tokens, recompute=args.mode,
        autocast=autocast_dtype("auto", "cpu"), pad_id=tok.pad_token_id or 0,
    )  # fmt: skip
    t0, c0 = time.perf_counter(), time.process_time()
    metrics = updater.update(samples)
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"update_s": secs, "update_cpu_s": cpu, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "micro_batches": metrics["train/micro_batches"], "autocast": updater.optim.autocast}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", default="768,3072,8192", help="optim.micro_batch_tokens values")
    p.add_argument("--modes", default="off,selective,full", help="optim.recompute values")
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--prompt-len", type=int, default=100)
    p.add_argument("--response-len", type=int, default=128)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--rss-limit-mib", type=float, default=float("inf"),
                   help="marked: the least CPU among settings whose peak stays within this (0.6x TRL's step peak)")
    p.add_argument("--out")
    p.add_argument("--micro-batch-tokens", type=int, help=argparse.SUPPRESS)  # worker mode
    p.add_argument("--mode", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.mode:
        print("RESULT " + json.dumps(worker(args)), flush=True)
        return
    from metaagent.policy.precision import cpu_kind

    settings = [(int(t), m) for t in args.tokens.split(",") for m in args.modes.split(",")]
    head = [f"# {' '.join(sys.argv)}   ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
            f"CPU kind {cpu_kind()}, {os.cpu_count()} CPUs; {args.samples} samples x ({args.prompt_len} prompt + "
            f"{args.response_len} response) tokens; one update per fresh process, {args.rounds} round(s)"]  # fmt: skip
    print("\n".join(head), flush=True)
    runs: dict = {s: [] for s in settings}
    for _ in range(args.rounds):
        for tokens, mode in settings:
            load = os.getloadavg()[0]
            cmd = [sys.executable, os.path.abspath(__file__), "--micro-batch-tokens", str(tokens), "--mode", mode,
                   "--samples", str(args.samples), "--prompt-len", str(args.prompt_len),
                   "--response-len", str(args.response_len)]  # fmt: skip
            out = subprocess.run(cmd, capture_output=True, text=True)
            lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
            if out.returncode or not lines:
                raise SystemExit(f"setting {tokens}/{mode} failed:\n{out.stderr[-3000:]}")
            r = json.loads(lines[-1][7:])
            r["load"] = load
            runs[(tokens, mode)].append(r)
            print(f"  {tokens:>6} {mode:<10}{r['update_s']:>8.1f} s{r['update_cpu_s']:>8.1f} CPU s"
                  f"{r['peak_rss_mib']:>8.0f} MiB  "
                  f"{r['micro_batches']:.0f} micro-batches  load {load:.1f}", flush=True)  # fmt: skip
    rows = {s: (median(r["update_s"] for r in rs), median(r["peak_rss_mib"] for r in rs),
                median(r["update_cpu_s"] for r in rs)) for s, rs in runs.items()}  # fmt: skip
    ok = [s for s, (_, m, _) in rows.items() if m <= args.rss_limit_mib] or list(rows)
    best = min(ok, key=lambda s: rows[s][2])  # CPU seconds: what a loaded shared machine moves least
    base = rows.get((768, "selective"))
    lines = [f"{'tokens':>8} {'recompute':<10}{'update s':>9}{'CPU s':>8}{'peak MiB':>9}  vs 768/selective"]
    for s, (secs, mib, cpu) in rows.items():
        ratio = (f"{base[0] / secs:.2f}x wall, {base[2] / cpu:.2f}x CPU, {mib / base[1]:.2f}x memory"
                 if base else "-")  # fmt: skip
        mark = "   <- least CPU within the memory budget" if s == best else ""
        lines.append(f"{s[0]:>8} {s[1]:<10}{secs:>9.1f}{cpu:>8.1f}{mib:>9.0f}  {ratio}{mark}")
    lines.append(f"load after {os.getloadavg()[0]:.1f}")
    print("\n".join(lines), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(head + lines) + "\n")


if __name__ == "__main__":
    main()
