"""Sokoban (App. A.1.5; default 6 x 6, one box) with a reverse-play generator.

Generator (after gym-sokoban's ``generate_room``, simplified; deterministic in the seed): a walled room
(border walls plus a few seeded inner walls, kept connected), a goal with the box on it and the player
next to it, then ``num_steps`` random *pulls* (reverse pushes: the player steps back and drags the box),
changing direction with probability ``p_change_directions``. Every pull is the reverse of a legal push,
so the final layout is solvable by construction. Layouts with the box closer than ``min_box_distance`` to
the goal or in a static corner deadlock are rejected and the next sub-seed is tried.

Symbols ``#`` wall, `` `` floor, ``.`` goal, ``$`` box, ``@`` player, ``*`` box on goal, ``+`` player on goal.
A push is legal if the cell behind the box is in bounds, not a wall and not a box; an illegal move leaves
the state unchanged. Success: all boxes on goals.

Terms: ``team = 1`` if all boxes on goals else ``b/B`` (boxes on goals over boxes); Planner ``loc = 0.1
s_fmt + 0.45 s_leg + 0.45 s_dlk`` (s_dlk = no static corner deadlock for boxes off goals); Tool ``loc = 0.1
s_fmt + 0.3 s_exec + 0.6 s_pot``, ``psi = -sum_boxes min_goals Manhattan``, ``s_pot = 1{psi_k >= psi_{k-1}}``.
Reference shaped reward per move: ``-0.01`` step, ``-0.05`` invalid, ``+1`` box onto a goal, ``-0.5`` box
off a goal, ``+10`` solved, plus ``0.1 (0.99 psi(next) - psi(cur))``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from .base import MOVES, EnvError, PlanEnv, parse_actions, parse_final, register_env

Cell = tuple[int, int]


def corner_deadlock(walls: set[Cell], boxes: set[Cell], goals: set[Cell]) -> bool:
    """A box off the goals with walls on two orthogonal sides can never move again (static corner)."""
    for r, c in boxes - goals:
        vert = (r - 1, c) in walls or (r + 1, c) in walls
        horiz = (r, c - 1) in walls or (r, c + 1) in walls
        if vert and horiz:
            return True
    return False


def _reachable(free: set[Cell], start: Cell) -> set[Cell]:
    seen, stack = {start}, [start]
    while stack:
        r, c = stack.pop()
        for dr, dc in MOVES.values():
            n = (r + dr, c + dc)
            if n in free and n not in seen:
                seen.add(n)
                stack.append(n)
    return seen


def generate(seed: int, size: int = 6, num_steps: int = 25, p_change_directions: float = 0.35,
             min_box_distance: int = 2, tries: int = 200) -> tuple[set[Cell], Cell, Cell, Cell]:  # fmt: skip
    """(walls, goal, box, player): one box, solvable, no initial corner deadlock; deterministic in ``seed``."""
    if size < 5:
        raise EnvError(f"sokoban size must be >= 5, got {size}")
    for attempt in range(tries):
        rng = random.Random(f"sokoban:{seed}:{size}:{attempt}")
        walls = {(r, c) for r in range(size) for c in range(size) if r in (0, size - 1) or c in (0, size - 1)}
        inner = [(r, c) for r in range(1, size - 1) for c in range(1, size - 1)]
        for cell in rng.sample(inner, rng.randint(0, max(0, (size - 2) ** 2 // 8))):
            walls.add(cell)
        free = {cell for cell in inner if cell not in walls}
        if not free or _reachable(free, next(iter(sorted(free)))) != free:
            continue
        goal = rng.choice(sorted(free))
        box = goal
        starts = [(goal[0] + dr, goal[1] + dc) for dr, dc in MOVES.values() if (goal[0] + dr, goal[1] + dc) in free]
        if not starts:
            continue
        player = rng.choice(starts)
        d = (player[0] - box[0], player[1] - box[1])
        for _ in range(num_steps):
            if rng.random() < p_change_directions:
                d = rng.choice(list(MOVES.values()))
            nxt = (player[0] + d[0], player[1] + d[1])
            if nxt not in free or nxt == box:
                continue
            # a pull: the box follows the player if it is right behind it
            if (player[0] - d[0], player[1] - d[1]) == box:
                box = player
            player = nxt
        dist = abs(box[0] - goal[0]) + abs(box[1] - goal[1])
        if dist >= min_box_distance and not corner_deadlock(walls, {box}, {goal}):
            return walls, goal, box, player
    raise EnvError(f"sokoban seed {seed}: no layout in {tries} tries")


@register_env
class Sokoban(PlanEnv):
    name = "sokoban"
    rules = (
        "Solve the Sokoban puzzle: push every box ($) onto a goal (.). '#' wall, '@' you, '*' box on goal, "
        "'+' you on a goal. Moves: U, D, L, R; you can push a box but not pull it. Answer with the move list, e.g. [U, R]."
    )
    default_size = 6
    lam = 0.4

    def __init__(self, spec: Mapping[str, Any]) -> None:
        super().__init__(spec)
        self.size = int(spec.get("size", self.default_size))
        if int(spec.get("boxes", 1)) != 1:
            raise EnvError("sokoban: only one box is generated (the paper's setting)")
        walls, goal, box, player = generate(int(spec["seed"]), self.size)
        self.walls, self.goals, self.boxes, self.player = walls, {goal}, {box}, player

    @property
    def success(self) -> bool:
        return self.boxes <= self.goals

    def psi(self) -> int:
        return -sum(min(abs(b[0] - g[0]) + abs(b[1] - g[1]) for g in self.goals) for b in self.boxes)

    def observe(self) -> str:
        rows = []
        for r in range(self.size):
            row = ""
            for c in range(self.size):
                p, g, b = (r, c) == self.player, (r, c) in self.goals, (r, c) in self.boxes
                row += "#" if (r, c) in self.walls else "+" if p and g else "@" if p else "*" if b and g else "$" if b else "." if g else " "
            rows.append(row)
        return "\n".join(rows)

    def move(self, m: str) -> tuple[bool, float]:
        """Apply one move; returns (legal, reference shaped reward of the move)."""
        dr, dc = MOVES[m]
        nxt = (self.player[0] + dr, self.player[1] + dc)
        psi0 = self.psi()
        on0 = len(self.boxes & self.goals)
        if nxt in self.walls or not (0 <= nxt[0] < self.size and 0 <= nxt[1] < self.size):
            return False, -0.05
        if nxt in self.boxes:
            behind = (nxt[0] + dr, nxt[1] + dc)
            if behind in self.walls or behind in self.boxes or not (0 <= behind[0] < self.size and 0 <= behind[1] < self.size):
                return False, -0.05
            self.boxes = (self.boxes - {nxt}) | {behind}
        self.player = nxt
        on1 = len(self.boxes & self.goals)
        r = -0.01 + 1.0 * max(0, on1 - on0) - 0.5 * max(0, on0 - on1) + 0.1 * (0.99 * self.psi() - psi0)
        return True, r + (10.0 if self.success else 0.0)

    def apply(self, answer: str) -> dict[str, Any]:
        moves = parse_actions(parse_final(answer))
        facts: dict[str, Any] = {"moves": moves, "legal": [], "shaped": 0.0}
        for m in moves or []:
            if self.success:
                break
            ok, r = self.move(m)
            facts["legal"].append(ok)
            facts["shaped"] += r
        return facts

    def parsed(self, facts: dict[str, Any]) -> bool:
        return facts["moves"] is not None

    def terms(self, before: PlanEnv, facts: dict[str, Any], kind: str, executed: bool) -> dict[str, float]:
        assert isinstance(before, Sokoban)
        team = 1.0 if self.success else len(self.boxes & self.goals) / len(self.boxes)
        s_fmt = float(facts["moves"] is not None)
        if kind == "planner":
            s_leg = float(s_fmt == 1.0 and all(facts["legal"]))
            s_dlk = float(not corner_deadlock(self.walls, self.boxes, self.goals))
            loc = 0.1 * s_fmt + 0.45 * s_leg + 0.45 * s_dlk
            return {"team": team, "loc": loc, "s_fmt": s_fmt, "s_leg": s_leg, "s_dlk": s_dlk}
        s_exec = float(executed)
        s_pot = float(self.psi() >= before.psi())
        loc = 0.1 * s_fmt + 0.3 * s_exec + 0.6 * s_pot
        return {"team": team, "loc": loc, "s_fmt": s_fmt, "s_exec": s_exec, "s_pot": s_pot}

    def shaped(self, before: PlanEnv, facts: dict[str, Any]) -> float:
        return float(facts["shaped"])
