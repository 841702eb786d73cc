"""A warm start in one call: fine-tune a model on a list of chat examples, as the CPU demos and the
learning tests do to teach a random ``tiny`` model a reply format before RL (a seeded, constant-lr SFT)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .trainer import SFTConfig, SFTTrainer


def sft_on_rows(
    rows: Iterable[Mapping[str, Any]],
    out: str | Path,
    *,
    steps: int,
    name: str = "warm",
    kinds: Sequence[str] = ("executor",),
    model: str = "tiny",
    lr: float = 1e-2,
    batch_size: int = 8,
    seed: int = 0,
) -> str:
    """Write ``rows`` (``{"messages": [...], "kind": ...}``) to ``out/<name>.jsonl``, train ``model`` on them for
    ``steps`` optimizer steps, and return the merged model folder ``out/<name>`` (a valid ``--model``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = SFTConfig(
        data=[str(data)], model=model, out=str(out / name), kinds=list(kinds), epochs=1000, max_steps=steps,
        lr=lr, batch_size=batch_size, schedule="constant", seed=seed,
    )  # fmt: skip
    return str(SFTTrainer(cfg).run())
