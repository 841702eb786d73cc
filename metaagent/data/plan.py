"""Planning task sets (AT-GRPO, seed 003): seeded generator rows, no files.

``DatasetSpec("planpath", split="train", limit=200, env={"size": 10, "block_ratio": 0.22})`` yields tasks
whose ``metadata["env"]`` is ``{"name", "seed", ...params}``; the board itself is built by
:func:`metaagent.envs.make_env` wherever it is needed (tools, rewards). Train, validation and test use
disjoint seed ranges (:data:`SPLIT_SEEDS`); boards are deduplicated within a split by their rendering. Each
registered environment is one source (:func:`plan_source`), its task text the environment's ``rules``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from metaagent.envs import ENVS, make_env

from .errors import DataError
from .sources import Source
from .tasks import Task

SPLIT_SEEDS = {"train": 0, "val": 1_000_000, "test": 2_000_000}
DEFAULT_COUNT = 256
MAX_SEEDS_PER_TASK = 20  # seeds tried per kept board before giving up (duplicates are skipped)


def plan_rows(source: str, split: str, count: int, params: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    if split not in SPLIT_SEEDS:
        raise DataError(f"{source}: split must be one of {sorted(SPLIT_SEEDS)}, got {split!r}")
    seen: set[str] = set()
    seed = SPLIT_SEEDS[split] + int(params.get("seed_offset", 0))
    limit = SPLIT_SEEDS[split] + 999_999
    made = 0
    while made < count:
        if seed > limit or seed - SPLIT_SEEDS[split] > MAX_SEEDS_PER_TASK * count:
            raise DataError(f"{source}: could not make {count} distinct boards in split {split!r}")
        spec = {k: v for k, v in params.items() if k != "seed_offset"}
        spec.update(name=source, seed=seed)
        board = make_env(spec).observe()
        seed += 1
        if board in seen:
            continue
        seen.add(board)
        made += 1
        yield {"env": spec, "board": board}


def plan_task(row: Mapping[str, Any], index: int, spec: Any) -> Task:
    env = dict(row["env"])
    kind = ENVS.get(env["name"])
    size = int(env.get("size", kind.default_size))
    rules = kind.rules.format(size=size, box=int(size**0.5))
    question = f"{rules}\n\nInitial state:\n{row['board']}"
    return Task(
        id=f"{env['name']}-{spec.split_name}-{env['seed']}",
        domain="plan",
        question=question,
        source=env["name"],
        split=spec.split_name,
        metadata={"env": env},
    )


def plan_source(name: str) -> Source:
    """The data source of the registered environment ``name`` (:func:`metaagent.envs.register_env`): boards
    generated from seeds (:func:`plan_rows`; ``spec.limit`` boards, default :data:`DEFAULT_COUNT`)."""
    ENVS.get(name)  # an unknown environment is an error naming the registered ones

    def rows(spec: Any) -> Iterator[dict[str, Any]]:
        return plan_rows(spec.source, spec.split_name, spec.limit or DEFAULT_COUNT, spec.env or {})

    return Source(name, "plan", None, "train", plan_task, rows=rows,
                  note="generated from seeds (AT-GRPO planning env)")  # fmt: skip
