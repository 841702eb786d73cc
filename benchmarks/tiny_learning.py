"""Does a real (tiny, warm-started) model learn under the local trainer? The two learning claims that used to be
tests (tests/train/test_trainer_run.py), measured here because their outcome is sampled: a run on another CPU
samples other replies, so a fixed threshold can flip there. Printed per run: the curve, the first-4 and last-8
step means, and the least-squares slope per step with its 95% t interval (metaagent.eval.metrics.slope_ci).

- ``executor``: executor_only, a frozen one-agent design; the executor is warm-started to deliver in the tag
  about 40% of the time (tests/train/warm_tiny.py, ``executor``). Measured: ``rollout/delivery_rate`` and
  ``rollout/reward/executor``.
- ``designer``: designer_only with the compact prompt; the designer is warm-started on valid and refused
  scripts (``designer_mixed``), the executor always delivers (``executor_tagged``). Measured:
  ``rollout/valid_script_rate`` and ``rollout/reward/designer``.

    nice -n 10 python benchmarks/tiny_learning.py --runs executor designer --seeds 0 1 \\
        --out benchmarks/results/tiny_learning.json

A claim holds for a run when its slope interval lies above 0. Results: ``benchmarks/results/tiny_learning.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from metaagent.lazy import import_file

ROOT = Path(__file__).resolve().parents[1]
#: the warm-start builders the tests use
warm_start = import_file(ROOT / "tests" / "train" / "warm_tiny.py", "warm_tiny")

RUNS = {
    "executor": ("rollout/delivery_rate", "rollout/reward/executor"),
    "designer": ("rollout/valid_script_rate", "rollout/reward/designer"),
}


def config(run: str, out: Path, warm: dict[str, str], seed: int, steps: int):
    from metaagent.train.config import TrainConfig

    SCRIPT, TRAIN_SPEC = warm_start.SCRIPT, warm_start.TRAIN_SPEC

    common = [
        "policy.weights=separate",
        f"policy.designer_model={warm['designer']}",
        f"policy.executor_model={warm['executor']}",
        "policy.max_batch_size=16",
        f"data.train=[{json.dumps(TRAIN_SPEC)}]",
        "data.val=[]",
        "data.batch_size=4",
        "rollout.k_templates=1",
        "rollout.designer.max_tokens=40",
        "rollout.executor.max_tokens=16",
        "rollout.executor.stop=['</delivery>']",
        "rollout.sandbox_workers=2",
        "optim.lr=1e-3",
        f"trainer.steps={steps}",
        f"trainer.seed={seed}",
        "trainer.save_every=0",
        "trainer.tensorboard=false",
        f"trainer.out={out}",
    ]
    if run == "executor":
        script = out.parent / "solver.py"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(SCRIPT)
        extra = ["schedule.mode=executor_only", f"rollout.frozen_designer={script}", "rollout.m_designs=1",
                 "rollout.n_executions=8"]  # fmt: skip
    else:
        extra = ["schedule.mode=designer_only", "rollout.designer_prompt=compact", "rollout.m_designs=8",
                 "rollout.n_executions=1"]  # fmt: skip
    return TrainConfig.load(None, [*common, *extra])


def measure(run: str, seed: int, steps: int, root: Path) -> dict:
    from metaagent.eval.metrics import slope_ci
    from metaagent.train.loop import TrainLoop

    kinds = {"executor": ("designer", "executor"), "designer": ("designer_mixed", "executor_tagged")}[run]
    warm_tiny = warm_start.warm_tiny
    warm = {"designer": warm_tiny(root / kinds[0], kinds[0]), "executor": warm_tiny(root / kinds[1], kinds[1])}
    t0 = time.perf_counter()
    cfg = config(run, root / f"{run}-{seed}" / "run", warm, seed, steps)
    with TrainLoop(cfg) as trainer:
        results = trainer.train()
    out: dict = {"run": run, "seed": seed, "steps": steps, "seconds": round(time.perf_counter() - t0, 1)}
    # what precision "auto" resolved to on this machine (bf16 rollout copy, autocast and TIS where supported)
    out["precision"] = {"policy.dtype": cfg.policy.dtype, "optim.autocast": cfg.optim.autocast,
                        "optim.tis_cap": cfg.optim.tis_cap}  # fmt: skip
    for key in RUNS[run]:
        curve = [r.metrics[key] for r in results]
        lo_hi = slope_ci(list(enumerate(curve)))
        out[key] = {
            "curve": [round(x, 4) for x in curve],
            "first4": round(sum(curve[:4]) / 4, 4),
            "last8": round(sum(curve[-8:]) / 8, 4),
            "slope": [round(x, 5) for x in lo_hi],
            "rises": lo_hi[1] > 0,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", choices=sorted(RUNS), default=sorted(RUNS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in args.runs:
            for seed in args.seeds:
                row = measure(run, seed, args.steps, Path(tmp))
                rows.append(row)
                for key in RUNS[run]:
                    m = row[key]
                    slope, lo, hi = m["slope"]
                    print(f"{run} seed {seed} {key}: {m['first4']:.2f} -> {m['last8']:.2f}, slope "
                          f"{slope:+.4f} [{lo:+.4f}, {hi:+.4f}] a step ({row['seconds']:.0f} s)")  # fmt: skip
                    print("  curve:", " ".join(f"{x:.2f}" for x in m["curve"]))
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "results": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
