"""Sudoku N x N (App. A.1.3; default 4 x 4 with 2 x 2 boxes, digits 1..N, 0 = empty).

Generator (the paper gives none; the reference code reads a JSON file that is not released): the pattern
solution ``g[r][c] = ((b r + r // b + c) mod N) + 1`` (b = box side), a seeded digit permutation, row swaps
within bands, band swaps, column swaps within stacks, stack swaps and an optional transpose; cells are then
removed in seeded order, each only while the solution stays unique, until ``blanks`` are empty (or no cell
can be removed).

Answers (after ``#####``): the full grid as JSON ``[[..], ..]`` (replaces the board) or fill steps
``[[r, c, v], ..]`` (1-based, as the prompt says). Success: no empty cell, every row, column and box a
permutation of 1..N, and every given kept (the reference code does not check givens; we do).

Terms: ``team = 1{solved}``; Planner ``loc = 0.15 s_fmt + 0.55 s_legal + 0.30 s_prog`` (s_legal = no
row/col/box duplicate in the new grid, s_prog = newly filled cells / N^2); Tool ``loc = 0.1 s_fmt + 0.2
s_exec + 0.7 s_san`` (s_san = every applied edit is consistent with its row, column and box).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from .base import EnvError, PlanEnv, parse_final, parse_json, register_env


def _box(n: int) -> int:
    b = math.isqrt(n)
    if b * b != n:
        raise EnvError(f"sudoku size must be a square (4, 9), got {n}")
    return b


def count_solutions(grid: list[list[int]], limit: int = 2) -> int:
    """Number of completions of ``grid`` (stops at ``limit``)."""
    n = len(grid)
    b = _box(n)
    for r in range(n):
        for c in range(n):
            if grid[r][c] == 0:
                found = 0
                for v in range(1, n + 1):
                    if _fits(grid, r, c, v, b):
                        grid[r][c] = v
                        found += count_solutions(grid, limit - found)
                        grid[r][c] = 0
                        if found >= limit:
                            return found
                return found
    return 1


def _fits(grid: list[list[int]], r: int, c: int, v: int, b: int) -> bool:
    n = len(grid)
    if any(grid[r][j] == v for j in range(n) if j != c) or any(grid[i][c] == v for i in range(n) if i != r):
        return False
    br, bc = r - r % b, c - c % b
    return not any(grid[i][j] == v for i in range(br, br + b) for j in range(bc, bc + b) if (i, j) != (r, c))


def duplicates(grid: list[list[int]]) -> bool:
    """Whether a row, column or box holds a digit twice (zeros ignored)."""
    n, b = len(grid), _box(len(grid))
    units = [[(r, c) for c in range(n)] for r in range(n)] + [[(r, c) for r in range(n)] for c in range(n)]
    units += [[(br + i, bc + j) for i in range(b) for j in range(b)] for br in range(0, n, b) for bc in range(0, n, b)]
    for unit in units:
        vals = [grid[r][c] for r, c in unit if grid[r][c]]
        if len(vals) != len(set(vals)):
            return True
    return False


def generate(seed: int, size: int = 4, blanks: int = 10) -> tuple[list[list[int]], list[list[int]]]:
    """(puzzle, solution): a puzzle with a unique solution; deterministic in ``seed``."""
    n, b = size, _box(size)
    rng = random.Random(f"sudoku:{seed}:{size}:{blanks}")
    g = [[((b * r + r // b + c) % n) + 1 for c in range(n)] for r in range(n)]
    perm = list(range(1, n + 1))
    rng.shuffle(perm)
    g = [[perm[v - 1] for v in row] for row in g]
    bands = list(range(b))
    rng.shuffle(bands)
    rows = [band * b + i for band in bands for i in rng.sample(range(b), b)]
    g = [g[r] for r in rows]
    stacks = list(range(b))
    rng.shuffle(stacks)
    cols = [s * b + j for s in stacks for j in rng.sample(range(b), b)]
    g = [[row[c] for c in cols] for row in g]
    if rng.random() < 0.5:
        g = [list(col) for col in zip(*g)]
    solution = [row[:] for row in g]
    puzzle = [row[:] for row in g]
    cells = [(r, c) for r in range(n) for c in range(n)]
    rng.shuffle(cells)
    removed = 0
    for r, c in cells:
        if removed >= blanks:
            break
        keep, puzzle[r][c] = puzzle[r][c], 0
        if count_solutions([row[:] for row in puzzle]) == 1:
            removed += 1
        else:
            puzzle[r][c] = keep
    return puzzle, solution


@register_env
class Sudoku(PlanEnv):
    name = "sudoku"
    rules = (
        "Solve the {size}x{size} Sudoku: fill every 0 with a digit 1..{size} so that each row, column and "
        "{box}x{box} box holds every digit once; keep the given digits. Answer with the full grid as JSON "
        "[[...], ...] or a JSON list of fill steps [[row, col, value], ...] (1-based)."
    )
    default_size = 4
    lam = 0.6

    def __init__(self, spec: Mapping[str, Any]) -> None:
        super().__init__(spec)
        self.size = int(spec.get("size", self.default_size))
        self.givens, self.solution = generate(int(spec["seed"]), self.size, int(spec.get("blanks", 10)))
        self.grid = [row[:] for row in self.givens]

    @property
    def success(self) -> bool:
        n = self.size
        full = all(v != 0 for row in self.grid for v in row)
        kept = all(self.grid[r][c] == self.givens[r][c] for r in range(n) for c in range(n) if self.givens[r][c])
        return full and kept and not duplicates(self.grid)

    def observe(self) -> str:
        return "\n".join(" ".join(str(v) for v in row) for row in self.grid)

    def _parse(self, answer: str) -> tuple[str, Any]:
        value = parse_json(parse_final(answer))
        n = self.size
        ok_val = lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= n  # noqa: E731
        if isinstance(value, list) and len(value) == n and all(
            isinstance(row, list) and len(row) == n and all(ok_val(v) for v in row) for row in value
        ):
            return "grid", value
        if isinstance(value, list) and value and all(
            isinstance(s, list) and len(s) == 3 and all(ok_val(x) for x in s) for s in value
        ):
            return "steps", [(r - 1, c - 1, v) for r, c, v in value]
        return "invalid", None

    def apply(self, answer: str) -> dict[str, Any]:
        form, value = self._parse(answer)
        before = [row[:] for row in self.grid]
        edits: list[tuple[int, int, int]] = []
        if form == "grid":
            edits = [(r, c, value[r][c]) for r in range(self.size) for c in range(self.size) if value[r][c] != before[r][c]]
        elif form == "steps":
            edits = list(value)
        sane = True
        for r, c, v in edits:
            self.grid[r][c] = v
        b = _box(self.size)
        for r, c, v in edits:
            sane = sane and _fits(self.grid, r, c, v, b)
        return {"form": form, "before": before, "edits": edits, "sane": sane}

    def parsed(self, facts: dict[str, Any]) -> bool:
        return facts["form"] != "invalid"

    def terms(self, before: PlanEnv, facts: dict[str, Any], kind: str, executed: bool) -> dict[str, float]:
        team = float(self.success)
        s_fmt = float(facts["form"] != "invalid")
        if kind == "planner":
            s_legal = float(not duplicates(self.grid))
            filled = sum(1 for r in range(self.size) for c in range(self.size)
                         if facts["before"][r][c] == 0 and self.grid[r][c] != 0)  # fmt: skip
            s_prog = filled / self.size**2
            loc = 0.15 * s_fmt + 0.55 * s_legal + 0.30 * s_prog
            return {"team": team, "loc": loc, "s_fmt": s_fmt, "s_legal": s_legal, "s_prog": s_prog}
        s_exec = float(executed)
        s_san = float(s_fmt == 1.0 and facts["sane"])
        loc = 0.1 * s_fmt + 0.2 * s_exec + 0.7 * s_san
        return {"team": team, "loc": loc, "s_fmt": s_fmt, "s_exec": s_exec, "s_san": s_san}
