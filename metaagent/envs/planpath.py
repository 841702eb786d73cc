"""Plan-Path (App. A.1.4): a grid with walls, reach the goal with moves U/D/L/R.

Generator: each cell is a wall with probability ``block_ratio`` (0.22), start and goal are distinct uniform
free cells; resampled (at most 2000 tries) until the goal is BFS-reachable. An illegal move (out of
bounds, into a wall) leaves the position unchanged. Success: position = goal.

Terms (``d_k`` Manhattan distance to the goal after turn k, ``d_0 = max(1, initial distance)``):
``team = 1`` at the goal else ``max(0, (d_{k-1} - d_k) / d_0)``; Planner ``loc = 0.2 s_fmt + 0.4 s_leg +
0.4 s_sp``; Tool ``loc = 0.1 s_fmt + 0.4 s_exec + 0.5 s_shape``, ``s_shape = 1{phi_k >= phi_{k-1}}``,
``phi = -d``. For a move list (the prompts ask for one): ``s_fmt`` = the list parses, ``s_leg`` = every move
legal, ``s_sp`` = every move up to the goal steps onto a shortest path (our reading; the appendix defines
one action). Reference shaped reward per move: ``-0.01`` legal / ``-0.10`` illegal, ``+ (0.99 phi(next) -
phi(cur))``, ``+1`` on reaching the goal, ``+0.5`` when reached in exactly the shortest-path length.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from typing import Any

from .base import MOVES, EnvError, PlanEnv, parse_actions, parse_final, register_env

MAX_TRIES = 2000


def bfs(walls: list[list[bool]], start: tuple[int, int]) -> dict[tuple[int, int], int]:
    """Shortest-path distances (4-neighbourhood) from ``start`` to every reachable free cell."""
    n = len(walls)
    dist = {start: 0}
    q = deque([start])
    while q:
        r, c = q.popleft()
        for dr, dc in MOVES.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < n and 0 <= nc < n and not walls[nr][nc] and (nr, nc) not in dist:
                dist[(nr, nc)] = dist[(r, c)] + 1
                q.append((nr, nc))
    return dist


def generate(seed: int, size: int = 10, block_ratio: float = 0.22) -> tuple[list[list[bool]], tuple[int, int], tuple[int, int]]:
    """(walls, start, goal) with the goal reachable from the start; deterministic in ``seed``."""
    if size < 2 or not 0 <= block_ratio < 1:
        raise EnvError(f"planpath needs size >= 2 and 0 <= block_ratio < 1, got {size}, {block_ratio}")
    rng = random.Random(f"planpath:{seed}:{size}:{block_ratio}")
    for _ in range(MAX_TRIES):
        walls = [[rng.random() < block_ratio for _ in range(size)] for _ in range(size)]
        free = [(r, c) for r in range(size) for c in range(size) if not walls[r][c]]
        if len(free) < 2:
            continue
        start, goal = rng.sample(free, 2)
        if goal in bfs(walls, start):
            return walls, start, goal
    raise EnvError(f"planpath seed {seed}: no reachable layout in {MAX_TRIES} tries")


@register_env
class PlanPath(PlanEnv):
    name = "planpath"
    rules = (
        "Find a path on the {size}x{size} grid from S to G. '#' is a wall, '.' is free. Moves: U, D, L, R "
        "(one cell each; moves into walls or off the grid do nothing). Answer with the move list, e.g. [U, R, D, L]."
    )
    default_size = 10
    lam = 0.5

    def __init__(self, spec: Mapping[str, Any]) -> None:
        super().__init__(spec)
        self.size = int(spec.get("size", self.default_size))
        self.walls, self.pos, self.goal = generate(int(spec["seed"]), self.size, float(spec.get("block_ratio", 0.22)))
        self.to_goal = bfs(self.walls, self.goal)  # shortest-path oracle: distance of every cell to the goal
        self.d0 = max(1, self.manhattan(self.pos))

    def manhattan(self, p: tuple[int, int]) -> int:
        return abs(p[0] - self.goal[0]) + abs(p[1] - self.goal[1])

    def legal(self, p: tuple[int, int], move: str) -> tuple[bool, tuple[int, int]]:
        r, c = p[0] + MOVES[move][0], p[1] + MOVES[move][1]
        if 0 <= r < self.size and 0 <= c < self.size and not self.walls[r][c]:
            return True, (r, c)
        return False, p

    @property
    def success(self) -> bool:
        return self.pos == self.goal

    def shortest(self) -> int:
        """Length of a shortest path from the current position to the goal."""
        return self.to_goal[self.pos]

    def observe(self) -> str:
        rows = []
        for r in range(self.size):
            row = ""
            for c in range(self.size):
                row += "S" if (r, c) == self.pos else "G" if (r, c) == self.goal else "#" if self.walls[r][c] else "."
            rows.append(row)
        return "\n".join(rows)

    def apply(self, answer: str) -> dict[str, Any]:
        moves = parse_actions(parse_final(answer))
        facts: dict[str, Any] = {"moves": moves, "path": [self.pos], "legal": []}
        for m in moves or []:
            if self.success:
                break
            ok, self.pos = self.legal(self.pos, m)
            facts["path"].append(self.pos)
            facts["legal"].append(ok)
        return facts

    def parsed(self, facts: dict[str, Any]) -> bool:
        return facts["moves"] is not None

    def terms(self, before: PlanEnv, facts: dict[str, Any], kind: str, executed: bool) -> dict[str, float]:
        assert isinstance(before, PlanPath)
        d_prev, d_now = before.manhattan(before.pos), self.manhattan(self.pos)
        team = 1.0 if self.success else max(0.0, (d_prev - d_now) / self.d0)
        s_fmt = float(facts["moves"] is not None)
        if kind == "planner":
            s_leg = float(s_fmt == 1.0 and all(facts["legal"]))
            path = facts["path"]
            s_sp = float(s_fmt == 1.0 and all(
                a in self.to_goal and b in self.to_goal and self.to_goal[b] == self.to_goal[a] - 1
                for a, b in zip(path, path[1:])
            ))  # fmt: skip
            loc = 0.2 * s_fmt + 0.4 * s_leg + 0.4 * s_sp
            return {"team": team, "loc": loc, "s_fmt": s_fmt, "s_leg": s_leg, "s_sp": s_sp}
        s_exec = float(executed)
        s_shape = float(-d_now >= -d_prev)
        loc = 0.1 * s_fmt + 0.4 * s_exec + 0.5 * s_shape
        return {"team": team, "loc": loc, "s_fmt": s_fmt, "s_exec": s_exec, "s_shape": s_shape}

    def shaped(self, before: PlanEnv, facts: dict[str, Any]) -> float:
        assert isinstance(before, PlanPath)
        total, path, steps = 0.0, facts["path"], 0
        optimal = before.shortest()
        for (a, b), ok in zip(zip(path, path[1:]), facts["legal"]):
            steps += 1
            total += (-0.01 if ok else -0.10) + (0.99 * -self.manhattan(b) - -self.manhattan(a))
            if b == self.goal:
                total += 1.0 + (0.5 if steps == optimal else 0.0)
        return total
