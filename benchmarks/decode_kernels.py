"""Decode-shaped products in each product form, per dtype, beside this CPU's matmul peak (issue #63, item 3).

A decode step multiplies the running batch's rows (B = 8: the default B x M designs; 32: ``max_batch_size``)
by every weight matrix of the model. For each linear shape of the embedded model (SmolLM2-135M: q/o 576->576,
k/v 576->192, gate/up 576->1536, down 1536->576, the LM head 576->49152) and each dtype this prints the median
microseconds of each form, interleaved call by call so load drift hits every form alike:

- ``linear``: ``F.linear(h, W)`` (= ``h @ W.T``: what ``nn.Linear`` does);
- ``w_ht``: ``(W @ h.T).T``, the product the other way round (a transposed view of a contiguous (out, B)
  result);
- ``packed``: bf16 only, oneDNN with the weight reordered once (``metaagent.policy.packed``);

then the chosen form per (dtype, layer kind) and its speed-up over ``linear``, the largest difference of each
form from ``linear`` (in units of the output's largest magnitude), and the decode GFLOP/s each form reaches on
the whole model's linears vs the measured matmul peak of the same dtype (best of 5 square matmuls). One run,
ratios.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/decode_kernels.py [--rows 8,32] [--calls 30] [--peak-n 2048]
"""

from __future__ import annotations

import argparse
import os
import time
from statistics import median

import metaagent  # noqa: F401  (before torch: passive OpenMP waiting)

#: (layer kind, in, out, how many per model): SmolLM2-135M's 30 layers and its LM head
SHAPES = (("q_proj/o_proj", 576, 576, 60), ("k_proj/v_proj", 576, 192, 60), ("gate/up", 576, 1536, 60),
          ("down", 1536, 576, 30), ("lm_head", 576, 49152, 1))  # fmt: skip


def forms(dtype):
    """The product forms measured for ``dtype``: name -> (prepare(W) -> state, run(h, state) -> (B, out))."""
    import torch

    from metaagent.policy import packed

    out = {
        "linear": (lambda w: w, lambda h, w: torch.nn.functional.linear(h, w)),
        "w_ht": (lambda w: w, lambda h, w: (w @ h.T).T),
    }
    if dtype == torch.bfloat16 and packed.supported():
        out["packed"] = (
            lambda w: torch.ops.mkldnn._reorder_linear_weight(w, 1),
            lambda h, p: torch.ops.mkldnn._linear_pointwise(h, p, None, "none", [], ""),
        )
    return out


def peak(dtype, n: int) -> float:
    import torch

    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def measure(dtype, rows: int, calls: int) -> dict:
    """Median seconds per call of each form and shape, and each form's max relative difference from linear."""
    import torch

    g = torch.Generator().manual_seed(0)
    fs = forms(dtype)
    out: dict = {}
    for kind, fan_in, fan_out, _ in SHAPES:
        w = (torch.randn(fan_out, fan_in, generator=g) / fan_in**0.5).to(dtype)
        h = torch.randn(rows, fan_in, generator=g).to(dtype)
        states = {name: prep(w) for name, (prep, _) in fs.items()}
        ref = fs["linear"][1](h, w).float()
        times: dict[str, list[float]] = {name: [] for name in fs}
        diff = {name: (fs[name][1](h, states[name]).float() - ref).abs().max().item() / ref.abs().max().item()
                for name in fs}  # fmt: skip
        for _ in range(calls):
            for name, (_, run) in fs.items():
                t0 = time.perf_counter()
                run(h, states[name])
                times[name].append(time.perf_counter() - t0)
        out[kind] = {name: (median(t), diff[name]) for name, t in times.items()}
    return out


def main() -> None:
    import torch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="8,32")
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--peak-n", type=int, default=2048)
    args = p.parse_args()
    from metaagent.policy.precision import _cpu_flags

    flags = _cpu_flags()
    kind = "AMX" if "amx_bf16" in flags else "avx512_bf16" if "avx512_bf16" in flags else "AVX2"
    print(f"CPU kind {kind}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    for dtype in (torch.float32, torch.bfloat16):
        top = peak(dtype, args.peak_n)
        print(f"\n{str(dtype)[6:]}: matmul peak ({args.peak_n}^3, best of 5) {top:.1f} GFLOP/s")
        for rows in (int(r) for r in args.rows.split(",")):
            res = measure(dtype, rows, args.calls)
            names = list(next(iter(res.values())))
            print(f"  rows {rows}: median us per call (max |diff| / max |out| vs linear)")
            print(f"    {'layer':<15}" + "".join(f"{n:>22}" for n in names) + "   fastest  vs linear")
            totals = dict.fromkeys(names, 0.0)
            best_total = 0.0
            for k, fan_in, fan_out, count in SHAPES:
                cells = "".join(f"{res[k][n][0] * 1e6:>11.1f} ({res[k][n][1]:.0e})" for n in names)
                fastest = min(names, key=lambda n: res[k][n][0])
                for n in names:
                    totals[n] += count * res[k][n][0]
                best_total += count * res[k][fastest][0]
                print(f"    {k:<15}{cells}   {fastest:<8} {res[k]['linear'][0] / res[k][fastest][0]:.2f}x")
            flops = 2 * rows * sum(c * i * o for _, i, o, c in SHAPES)
            ach = "  ".join(f"{n} {flops / t / 1e9:.1f} ({flops / t / 1e9 / top:.0%})" for n, t in totals.items())
            print(f"    whole model's linears, GFLOP/s (of peak): {ach}  fastest-per-layer {flops / best_total / 1e9:.1f} "
                  f"({flops / best_total / 1e9 / top:.0%})")  # fmt: skip
    print(f"\nload {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
