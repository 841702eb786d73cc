"""How far the shared weights move in the first steps of a new stage (paper Eq. 9), with the optimizer's
moments kept across the stage boundary (``optim.stage_switch: keep``) or cleared (``reset``).

One shared tiny model trains K executor-stage steps, then 3 designer-stage steps; both variants see the same
samples. Printed per designer-stage step: the L2 norm of the weight change. A last line shows that an
all-zero-advantage step moves nothing (the step is skipped).

    python benchmarks/stage_switch.py [--stage-len 5] [--lr 1e-4]
"""

from __future__ import annotations

import argparse
import random

import torch

from metaagent.learn.samples import Sample
from metaagent.policy.models import load_model_and_tokenizer
from metaagent.records import DESIGNER, EXECUTOR
from metaagent.train.local.update import PolicyUpdater


def samples(role: str, n: int, seed: int, vocab: int) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        r = rng.randint(3, 8)
        out.append(
            Sample(
                role=role,
                prompt_ids=[rng.randrange(vocab) for _ in range(rng.randint(4, 12))],
                response_ids=[rng.randrange(vocab) for _ in range(r)],
                old_logprobs=[-8.0] * r,
                advantage=rng.choice([-1.0, 1.0]),
                temperature=1.0,
                agent="Solver" if role == EXECUTOR else "",
                key=(i,),
            )
        )
    return out


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def run(stage_switch: str, stage_len: int, lr: float) -> list[float]:
    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer("tiny", dtype="float32")
    vocab = tok.vocab_size
    updater = PolicyUpdater(model, lr=lr, weight_decay=0.01)
    for step in range(stage_len):  # executor stage
        updater.update(samples(EXECUTOR, 8, seed=step, vocab=vocab), active_roles={EXECUTOR})
    if stage_switch == "reset":
        updater.reset_moments()
    moved = []
    for step in range(3):  # first steps of the designer stage
        before = flat(model)
        updater.update(samples(DESIGNER, 8, seed=100 + step, vocab=vocab), active_roles={DESIGNER})
        moved.append(float((flat(model) - before).norm()))
    return moved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stage-len", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-4)
    args = ap.parse_args()
    keep = run("keep", args.stage_len, args.lr)
    reset = run("reset", args.stage_len, args.lr)
    print(f"weight change ||dtheta||_2 in the first 3 designer-stage steps after {args.stage_len} executor steps "
          f"(tiny model, lr {args.lr})")
    print(f"{'step':>6} {'keep':>12} {'reset':>12} {'keep/reset':>11}")
    for i, (k, r) in enumerate(zip(keep, reset)):
        print(f"{i:>6} {k:>12.5f} {r:>12.5f} {k / r:>11.2f}")

    model, tok = load_model_and_tokenizer("tiny", dtype="float32")
    updater = PolicyUpdater(model, lr=args.lr, weight_decay=0.01)
    updater.update(samples(EXECUTOR, 8, seed=0, vocab=tok.vocab_size))
    zero = [Sample(**{**s.__dict__, "advantage": 0.0}) for s in samples(DESIGNER, 8, seed=1, vocab=tok.vocab_size)]
    before = flat(model)
    m = updater.update(zero)
    print(f"all-zero-advantage step: skipped={m['train/skipped_step']:.0f}, ||dtheta||_2 = "
          f"{float((flat(model) - before).norm()):.6f}")


if __name__ == "__main__":
    main()
