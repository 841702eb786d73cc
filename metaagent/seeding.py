"""Seed derivation: the one place where a seed is computed from other seeds and positions.

Every random choice in a rollout is seeded from the run seed through these functions, so a record's
``seed`` plus its positions reproduce it in any process and Python version (blake2b, not ``hash()``).
:func:`seeded_torch` applies a derived seed to what a library draws from torch's generator (a LoRA adapter's
initial weights).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any


def _seed31(text: str) -> int:
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


def derive_seed(*parts: Any) -> int:
    """A 31-bit seed from any parts (e.g. ``(run_seed, step, task_id, design)``)."""
    return _seed31(repr(parts))


def call_seed(seed: int | None, call_index: int) -> int | None:
    """The seed of agent call ``call_index`` of an execution seeded with ``seed`` (None: unseeded)."""
    return None if seed is None else _seed31(f"{seed}:{call_index}")


def branch_seed(seed: int | None, call_index: int, candidate: int) -> int | None:
    """The seed of candidate ``candidate`` of agent call ``call_index`` under tree sampling (AT-GRPO).

    Candidate 0 gets exactly :func:`call_seed`, so K = 1 reproduces an unbranched execution bit for bit.
    """
    if candidate == 0:
        return call_seed(seed, call_index)
    return None if seed is None else _seed31(f"{seed}:{call_index}:b{candidate}")


def lora_seed(run_seed: int, key: str) -> int:
    """The seed a new LoRA adapter of model ``key`` draws its initial weights under, in a run seeded with
    ``run_seed``: the same on every backend (local adapters, verl's FSDP engine)."""
    return derive_seed(run_seed, "lora", key)


@contextlib.contextmanager
def seeded_torch(seed: int) -> Iterator[None]:
    """torch's CPU generator seeded with ``seed`` for the block and put back as it was after it: what a library
    draws inside (peft's LoRA initialisation, which creates its layers on the CPU before moving them to the
    base layer's device) follows ``seed``, and nothing outside the block draws differently."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        yield
