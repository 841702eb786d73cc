"""Planning task sets (AT-GRPO, seed 003): seeded generator rows, no files.

``DatasetSpec("planpath", split="train", limit=200, env={"size": 10, "block_ratio": 0.22})`` yields tasks
whose ``metadata["env"]`` is ``{"name", "seed", ...params}``; the board itself is built by
:func:`metaagent.envs.make_env` wherever it is needed (tools, rewards). Train, validation and test use
disjoint seed ranges (:data:`SPLIT_SEEDS`); boards are deduplicated within a split by their rendering.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from metaagent.envs import make_env

from .errors import DataError
from .tasks import Task

PLAN_SOURCES = ("sudoku", "planpath", "sokoban")
SPLIT_SEEDS = {"train": 0, "val": 1_000_000, "test": 2_000_000}
DEFAULT_COUNT = 256
MAX_SEEDS_PER_TASK = 20  # seeds tried per kept board before giving up (duplicates are skipped)

RULES = {
    "sudoku": (
        "Solve the {size}x{size} Sudoku: fill every 0 with a digit 1..{size} so that each row, column and "
        "{box}x{box} box holds every digit once; keep the given digits. Answer with the full grid as JSON "
        "[[...], ...] or a JSON list of fill steps [[row, col, value], ...] (1-based)."
    ),
    "planpath": (
        "Find a path on the {size}x{size} grid from S to G. '#' is a wall, '.' is free. Moves: U, D, L, R "
        "(one cell each; moves into walls or off the grid do nothing). Answer with the move list, e.g. [U, R, D, L]."
    ),
    "sokoban": (
        "Solve the Sokoban puzzle: push every box ($) onto a goal (.). '#' wall, '@' you, '*' box on goal, "
        "'+' you on a goal. Moves: U, D, L, R; you can push a box but not pull it. Answer with the move list, e.g. [U, R]."
    ),
}


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
    size = int(env.get("size", {"sudoku": 4, "planpath": 10, "sokoban": 6}[env["name"]]))
    rules = RULES[env["name"]].format(size=size, box=int(size**0.5))
    question = f"{rules}\n\nInitial state:\n{row['board']}"
    return Task(
        id=f"{env['name']}-{spec.split_name}-{env['seed']}",
        domain="plan",
        question=question,
        source=env["name"],
        split=spec.split_name,
        metadata={"env": env},
    )
