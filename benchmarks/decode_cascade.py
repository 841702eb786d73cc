"""One decode layer's attention with and without shared-prefix (cascade) attention, beside where a decode step's
time goes.

``--part layer`` (default): the attention of one layer of the embedded model (SmolLM2-135M: 9 query heads,
3 key/value heads, head_dim 64) for one decode token per row, each row holding ``--own`` columns of its own after a
prefix of ``P`` tokens that ``per`` rows share: ``plain`` = each row reads its whole buffer (prefix copy included,
``metaagent.policy.kv._attend``), ``cascade`` = one matmul per prefix over its rows' queries plus each row's own
columns, merged by log-sum-exp (``metaagent.policy.kv._attend_cascade``). Median microseconds of alternating calls
(load drift hits both alike) and the ratio; what ``metaagent.policy.kv.SHARE_MIN_SAVED`` is read from.

``--part alternate``: the same decode run (below) with every shared prefix kept once (``SHARE_MIN_SAVED`` = 1)
and with none (unreachable), alternating ``--rounds`` times in one process so load drift hits both alike: median ms
of a decode step (the prefill not counted), the prefixes the default threshold keeps for these prompts, and the
largest |log-prob difference| of the tokens both sampled.

``--part step``: one decode run of the default config's designer prompts (as ``benchmarks/step.py``'s decode
table: ``--rows`` rows, 128-token budget, fp32 in the measured decode forms) with timers around every linear
(forward hooks), the store's attention (the key/value writes and the matmuls and softmax), the sampling and the
whole step; the rest is norms, RoPE, activations and Python.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/decode_cascade.py [--part layer|step] [--rows 8,32]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path
from statistics import median

import metaagent  # noqa: F401  (before torch: passive OpenMP waiting)

#: (rows, rows per shared prefix) x prefix tokens of the layer part
GRID = [(8, 2), (8, 8), (32, 2), (32, 8), (32, 32)]
PREFIXES = [229, 400, 800, 1000, 3000]


def _step_module():
    """benchmarks/step.py (its designer requests, warm-up and variants), loaded as a sibling file."""
    from metaagent.lazy import import_file

    return import_file(Path(__file__).with_name("step.py"), "step")


def _alternating(fns: list, calls: int) -> list[float]:
    """Median microseconds of each of ``fns``, called in turn ``calls`` times after a warm-up."""
    times: list[list[float]] = [[] for _ in fns]
    for i in range(calls + 10):
        for j, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            if i >= 10:
                times[j].append(time.perf_counter() - t0)
    return [median(t) * 1e6 for t in times]


def layer_part(own: int, calls: int) -> None:
    import torch

    from metaagent.policy import kv

    gen = torch.Generator().manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=gen)  # noqa: E731
    spare = kv.GROW_MIN
    print(f"one layer, {own} own columns a row (+{spare} spare), median us of {calls} alternating calls")
    print(f"  {'rows':>4} {'per prefix':>10} {'prefix':>7} {'saved cols':>10} {'plain':>8} {'cascade':>8} {'ratio':>7}")
    for rows, per in GRID:
        for p in PREFIXES:
            segments, full = rows // per, p + own
            query = rnd(rows, 9, 1, 64)
            k_full, v_full = rnd(rows, 3, full + spare, 64), rnd(rows, 3, full + spare, 64)
            bias_full = kv._bias((torch.arange(full + spare)[None] <= full).expand(rows, -1))
            k_own, v_own = rnd(rows, 3, own + spare, 64), rnd(rows, 3, own + spare, 64)
            bias_own = kv._bias((torch.arange(own + spare)[None] <= own).expand(rows, -1))
            prefix = (rnd(segments, 3, p, 64), rnd(segments, 3, p, 64), torch.zeros(segments, 1, 1, p))
            members = (torch.arange(rows).reshape(segments, per), torch.arange(rows), None)
            plain, cascade = _alternating(
                [
                    lambda: kv._attend(query, k_full, v_full, bias_full, 0.125),
                    lambda: kv._attend_cascade(query, (k_own, v_own, bias_own), prefix, members, 0.125),
                ],
                calls,
            )
            saved = segments * (per - 1) * p
            print(f"  {rows:>4} {per:>10} {p:>7} {saved:>10} {plain:>8.0f} {cascade:>8.0f} {plain / cascade:>6.2f}x")


def step_part(rows_list: list[int], share: bool) -> None:
    """The decode-step breakdown (module docstring)."""
    import dataclasses

    import torch

    from metaagent.policy import hf, kv

    bench = _step_module()
    if not share:
        kv.SHARE_MIN_SAVED = sys.maxsize
    cfg, policy = _policy_and_config(max(rows_list))
    spent: collections.defaultdict[str, float] = collections.defaultdict(float)
    on = [False]

    def timed(name: str, fn):
        def wrapper(*a, **k):
            if not on[0]:
                return fn(*a, **k)
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t0

        return wrapper

    started: dict[int, float] = {}
    for name, module in policy.decoder.named_modules():
        if isinstance(module, torch.nn.Linear):
            label = "LM head" if "lm_head" in name else "linears of the 30 layers"
            module.register_forward_pre_hook(lambda m, a: started.__setitem__(id(m), time.perf_counter()))
            module.register_forward_hook(
                lambda m, a, o, label=label: spent.__setitem__(label, spent[label] + time.perf_counter() - started[id(m)])
                if on[0] else None
            )  # fmt: skip
    kv.KVStore.attend = timed("attention (KV writes, matmuls, softmax)", kv.KVStore.attend)
    hf._RunningBatch._sample = timed("sampling (sample_next, finish checks)", hf._RunningBatch._sample)
    hf._RunningBatch.step = timed("step", hf._RunningBatch.step)
    parts = ["linears of the 30 layers", "LM head", "attention (KV writes, matmuls, softmax)",
             "sampling (sample_next, finish checks)"]  # fmt: skip
    for rows in rows_list:
        requests = bench._designer_requests(cfg, policy, rows)
        live = [policy._new_row(dataclasses.replace(r, sampling=r.sampling.replace(max_tokens=128))) for r in requests]
        steps = [0]

        def decode(live=live, steps=steps):
            batch = hf._RunningBatch(policy)
            batch.admit(live)
            spent.clear()
            on[0] = True
            while batch.rows:
                batch.step()
                steps[0] += 1
            on[0] = False

        bench.in_thread(lambda decode=decode: policy._run(decode))
        total = spent["step"]
        print(f"rows {rows}: {steps[0]} steps, {1000 * total / steps[0]:.1f} ms a step [load {os.getloadavg()[0]:.1f}]")
        for part in parts:
            print(f"  {part:<42}{1000 * spent[part] / steps[0]:8.1f} ms {spent[part] / total:6.1%}")
        rest = total - sum(spent[p] for p in parts)
        print(f"  {'rest (norms, RoPE, activations, Python)':<42}{1000 * rest / steps[0]:8.1f} ms {rest / total:6.1%}")


def _policy_and_config(rows: int):
    bench = _step_module()

    from metaagent.policy import hf
    from metaagent.train.config import TrainConfig

    cfg = TrainConfig.load("default", [*bench.VARIANTS["fp32"], "trainer.out=" + bench.tempfile.mkdtemp()])
    policy = hf.HFPolicy(cfg.policy.model, device="cpu", max_batch_size=rows, prefix_cache_mb=0, dtype="float32")
    bench.warm_up(policy)
    return cfg, policy


def alternate_part(rows_list: list[int], rounds: int) -> None:
    """Decode steps with and without shared prefixes, alternating (module docstring)."""
    import dataclasses

    bench = _step_module()

    from metaagent.policy import hf, kv

    cfg, policy = _policy_and_config(max(rows_list))
    default = kv.SHARE_MIN_SAVED
    for rows in rows_list:
        requests = bench._designer_requests(cfg, policy, rows)
        requests = [dataclasses.replace(r, sampling=r.sampling.replace(max_tokens=128)) for r in requests]
        prompts = [policy.encode(r) for r in requests]
        kept = {ids for ids in kv.shared_prefixes(prompts) if ids}
        times: dict[str, list[float]] = {"unshared": [], "shared": []}
        logprobs: dict[str, list] = {}
        for _ in range(rounds):
            for mode in times:
                kv.SHARE_MIN_SAVED = 1 if mode == "shared" else sys.maxsize
                live = [policy._new_row(r) for r in requests]
                box: list = []

                def decode(live=live, box=box):
                    batch = hf._RunningBatch(policy)
                    batch.admit(live)
                    segments = len(batch.store.prefix_ids)
                    t0, steps = time.perf_counter(), 0
                    while batch.rows:
                        batch.step()
                        steps += 1
                    box.append(((time.perf_counter() - t0) / steps, segments))

                bench.in_thread(lambda decode=decode: policy._run(decode))
                times[mode].append(box[0][0])
                logprobs[mode] = [(r.response_ids, r.logprobs) for r in live]
                segments = box[0][1]
        kv.SHARE_MIN_SAVED = default
        same = [(a, b) for (ra, a), (rb, b) in zip(logprobs["unshared"], logprobs["shared"]) if ra == rb]
        diff = max(abs(x - y) for a, b in same for x, y in zip(a, b))
        u, c = median(times["unshared"]) * 1e3, median(times["shared"]) * 1e3
        print(f"rows {rows}: {len(set(map(tuple, prompts)))} distinct prompts, shared prefixes {segments} "
              f"(SHARE_MIN_SAVED={default} keeps {len(kept)}); ms a decode step, median of {rounds}: unshared {u:.1f}, "
              f"shared {c:.1f}: {u / c:.2f}x; rows with identical tokens {len(same)}/{rows}, max |log-prob diff| "
              f"{diff:.1e} [load {os.getloadavg()[0]:.1f}]")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("layer", "alternate", "step"), default="layer")
    p.add_argument("--rounds", type=int, default=3, help="alternate part: runs per setting")
    p.add_argument("--own", type=int, default=64, help="layer part: a row's own columns (its response so far)")
    p.add_argument("--calls", type=int, default=100, help="layer part: calls per form")
    p.add_argument("--rows", default="8,32", help="step part: decode rows")
    p.add_argument("--unshared", action="store_true", help="step part: no shared prefixes (SHARE_MIN_SAVED unreachable)")
    args = p.parse_args()

    import torch

    from metaagent.policy.precision import cpu_kind

    print(f"CPU kind {cpu_kind()}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    if args.part == "layer":
        layer_part(args.own, args.calls)
    elif args.part == "alternate":
        alternate_part([int(r) for r in args.rows.split(",")], args.rounds)
    else:
        step_part([int(r) for r in args.rows.split(",")], share=not args.unshared)


if __name__ == "__main__":
    main()
