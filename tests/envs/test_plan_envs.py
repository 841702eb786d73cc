"""Planning environments (AT-GRPO App. A.1.3-A.1.5): generators, success checks, every reward term and
each mixing preset on hand-computed states."""

from __future__ import annotations

import copy

import pytest

from metaagent.envs import EnvError, make_env, mix_reward, parse_actions, parse_final
from metaagent.envs.planpath import PlanPath, bfs
from metaagent.envs.planpath import generate as gen_path
from metaagent.envs.sokoban import Sokoban, corner_deadlock
from metaagent.envs.sokoban import generate as gen_sok
from metaagent.envs.sudoku import Sudoku, count_solutions, duplicates
from metaagent.envs.sudoku import generate as gen_sudoku


# ---- generators -----------------------------------------------------------------------------------------

def test_sudoku_generator_unique_valid_and_seeded():
    boards = set()
    for seed in range(30):
        puzzle, solution = gen_sudoku(seed, 4, 10)
        assert not duplicates(solution) and all(v for row in solution for v in row)
        assert all(puzzle[r][c] in (0, solution[r][c]) for r in range(4) for c in range(4))  # givens kept
        assert count_solutions([row[:] for row in puzzle], limit=3) == 1
        assert sum(v == 0 for row in puzzle for v in row) <= 10
        boards.add(str(puzzle))
    assert len(boards) > 20
    assert gen_sudoku(7) == gen_sudoku(7)


def test_planpath_generator_reachable_wall_ratio_and_seeded():
    walls_total = 0
    for seed in range(40):
        walls, start, goal = gen_path(seed, 10, 0.22)
        assert start != goal and not walls[start[0]][start[1]] and not walls[goal[0]][goal[1]]
        assert goal in bfs(walls, start)
        walls_total += sum(map(sum, walls))
    assert 0.15 < walls_total / (40 * 100) < 0.28
    assert gen_path(3) == gen_path(3) and gen_path(3) != gen_path(4)


def test_sokoban_generator_solvable_and_no_initial_deadlock():
    for seed in range(15):
        walls, goal, box, player = gen_sok(seed, 6)
        assert box != goal and abs(box[0] - goal[0]) + abs(box[1] - goal[1]) >= 2
        assert not corner_deadlock(walls, {box}, {goal})
        assert player not in walls and box not in walls and player != box
        assert _solvable(walls, goal, box, player)


def _solvable(walls, goal, box, player, limit=200000):
    from collections import deque

    moves = [(-1, 0), (1, 0), (0, -1), (0, 1)]
    seen, q = {(box, player)}, deque([(box, player)])
    while q and len(seen) < limit:
        b, p = q.popleft()
        if b == goal:
            return True
        for dr, dc in moves:
            n = (p[0] + dr, p[1] + dc)
            if n in walls:
                continue
            nb = b
            if n == b:
                nb = (b[0] + dr, b[1] + dc)
                if nb in walls:
                    continue
            if (nb, n) not in seen:
                seen.add((nb, n))
                q.append((nb, n))
    return False


# ---- parsing ------------------------------------------------------------------------------------------------

def test_parsing_of_final_answers_and_move_lists():
    assert parse_final("think\n##### [U, R]") == "[U, R]"
    assert parse_final("no mark") == "no mark"
    assert parse_actions("[U,R,D,L]") == ["U", "R", "D", "L"]
    assert parse_actions('["u", "r"]') == ["U", "R"]
    assert parse_actions("[U, X]") is None and parse_actions("go up") is None


# ---- hand-built states -----------------------------------------------------------------------------------

def _path_env(walls_rows, start, goal) -> PlanPath:
    env = PlanPath({"seed": 0, "size": 10})
    env.size = len(walls_rows)
    env.walls = [[ch == "#" for ch in row] for row in walls_rows]
    env.pos, env.goal = start, goal
    env.to_goal = bfs(env.walls, goal)
    env.d0 = max(1, env.manhattan(start))
    return env


def test_planpath_terms_and_presets_by_hand():
    # 3x3, wall in the middle; start top-left, goal bottom-right: d0 = 4, shortest path 4
    env = _path_env(["...", ".#.", "..."], (0, 0), (2, 2))
    c = env.components("##### [R, R]", "planner")
    # two legal moves along a shortest path: d 4 -> 2, team = (4-2)/4
    assert c["team"] == 0.5 and (c["s_fmt"], c["s_leg"], c["s_sp"]) == (1.0, 1.0, 1.0)
    assert c["loc"] == pytest.approx(1.0)
    # shaped: per move -0.01 + (0.99 * -d_next + d_cur): (-0.01 + (-2.97 + 4)) + (-0.01 + (-1.98 + 3))
    assert c["shaped"] == pytest.approx((-0.01 + 1.03) + (-0.01 + 1.02))
    assert mix_reward(c, "alpha", "planpath") == pytest.approx(1.5)
    assert mix_reward(c, "alpha", "planpath", alpha=2.0) == pytest.approx(2.0)
    assert mix_reward(c, "lambda", "planpath") == pytest.approx(0.5 * 0.5 + 0.5 * 1.0)
    assert mix_reward(c, "pettingllms", "planpath") == pytest.approx(2.03)
    assert env.pos == (0, 0) and env.turn == 0  # components work on a copy
    # an illegal move (into the wall) leaves the position, fails s_leg and s_sp
    c = env.components("[D, R]", "planner")
    assert (c["s_leg"], c["s_sp"], c["team"]) == (0.0, 0.0, 0.25)
    assert c["loc"] == pytest.approx(0.2)
    # reaching the goal in exactly the shortest length: +1 +0.5 on the last move; team 1
    c = env.components("[R, R, D, D]", "planner")
    assert c["team"] == 1.0 and c["shaped"] == pytest.approx(
        (-0.01 + 1.03) + (-0.01 + 1.02) + (-0.01 + 1.01) + (-0.01 + 1.0) + 1.5
    )
    # tool: a format failure and a failed program; s_shape holds (no move, phi unchanged)
    c = env.components("nothing", "tool", executed=False)
    assert (c["s_fmt"], c["s_exec"], c["s_shape"], c["loc"], c["team"]) == (0.0, 0.0, 1.0, 0.5, 0.0)
    c = env.components("[L]", "tool", executed=True)  # illegal (out of bounds) but phi unchanged
    assert c["loc"] == pytest.approx(0.1 + 0.4 + 0.5)
    env.step("[R, R, D, D]")
    assert env.success and env.turn == 1


def test_sudoku_terms_and_presets_by_hand():
    env = Sudoku({"seed": 0, "size": 4, "blanks": 2})
    sol = env.solution
    holes = [(r, c) for r in range(4) for c in range(4) if env.givens[r][c] == 0]
    assert len(holes) == 2
    (r1, c1), (r2, c2) = holes
    steps = f"##### [[{r1 + 1}, {c1 + 1}, {sol[r1][c1]}], [{r2 + 1}, {c2 + 1}, {sol[r2][c2]}]]"
    c = env.components(steps, "planner")
    assert c["team"] == 1.0 and (c["s_fmt"], c["s_legal"]) == (1.0, 1.0) and c["s_prog"] == 2 / 16
    assert c["loc"] == pytest.approx(0.15 + 0.55 + 0.30 * 2 / 16)
    assert mix_reward(c, "alpha", "sudoku") == pytest.approx(1.0 + c["loc"])
    assert mix_reward(c, "lambda", "sudoku") == pytest.approx(0.6 + 0.4 * c["loc"])
    with pytest.raises(EnvError, match="not defined"):
        mix_reward(c, "pettingllms", "sudoku")
    # a full grid that changes a given is not a success even though it is a valid Sudoku
    r0, c0 = next((r, c) for r in range(4) for c in range(4) if env.givens[r][c])
    other = [row[:] for row in sol]
    bad = copy.deepcopy(other)
    bad[r0][c0] = other[r0][c0] % 4 + 1
    c = env.components(str(bad), "planner")
    assert c["team"] == 0.0 and c["s_legal"] == 0.0
    # tool: one wrong step violates the local constraints (s_san 0)
    wrong = next(v for v in range(1, 5) if v != sol[r1][c1] and not _conflict_free(env.grid, r1, c1, v))
    c = env.components(f"[[{r1 + 1}, {c1 + 1}, {wrong}]]", "tool", executed=True)
    assert (c["s_fmt"], c["s_exec"], c["s_san"]) == (1.0, 1.0, 0.0) and c["loc"] == pytest.approx(0.3)
    c = env.components("[[9, 9, 9]]", "tool", executed=True)  # out of range: format fails
    assert c["s_fmt"] == 0.0 and c["loc"] == pytest.approx(0.2)


def _conflict_free(grid, r, c, v):
    from metaagent.envs.sudoku import _fits

    g = [row[:] for row in grid]
    g[r][c] = v
    return _fits(g, r, c, v, 2)


def _sokoban(rows) -> Sokoban:
    env = Sokoban({"seed": 0, "size": len(rows)})
    env.walls = {(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "#"}
    env.goals = {(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch in ".*+"}
    env.boxes = {(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch in "$*"}
    env.player = next((r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch in "@+")
    return env


def test_sokoban_terms_and_presets_by_hand():
    env = _sokoban(["######", "#    #", "#@$ .#", "#    #", "#    #", "######"])
    assert env.observe().splitlines()[2] == "#@$ .#"
    c = env.components("##### [R, R]", "planner")  # box pushed onto the goal: solved
    assert c["team"] == 1.0 and (c["s_fmt"], c["s_leg"], c["s_dlk"]) == (1.0, 1.0, 1.0)
    # shaped: move 1: -0.01 + 0.1*(0.99*-1 - -2); move 2: -0.01 + 1 (box onto goal) + 0.1*(0 - -1) + 10
    assert c["shaped"] == pytest.approx((-0.01 + 0.1 * 1.01) + (-0.01 + 1.0 + 0.1 + 10.0))
    assert mix_reward(c, "alpha", "sokoban") == pytest.approx(2.0)
    assert mix_reward(c, "lambda", "sokoban") == pytest.approx(0.4 + 0.6 * 1.0)
    # pushing the box up into the top-right corner region: R then U-push from below
    env2 = _sokoban(["######", "#  $ #", "#  @ #", "#   .#", "#    #", "######"])
    c = env2.components("[U]", "planner")  # box into (0,3)? wall behind: illegal push, nothing moves
    assert c["s_leg"] == 0.0 and c["s_dlk"] == 1.0
    env3 = _sokoban(["######", "#    #", "#  $ #", "#  @ #", "#.   #", "######"])
    c = env3.components("[U]", "planner")  # box pushed against the top wall: (1,3) has a wall above only
    assert c["s_dlk"] == 1.0
    env4 = _sokoban(["######", "#    #", "#   $#", "#   @#", "#.   #", "######"])
    c = env4.components("[U]", "planner")  # box into the top-right corner: static deadlock
    assert c["s_dlk"] == 0.0 and c["loc"] == pytest.approx(0.1 + 0.45)
    c = env4.components("[U]", "tool", executed=True)  # psi: box moved away from the goal -> s_pot 0
    assert c["s_pot"] == 0.0 and c["loc"] == pytest.approx(0.1 + 0.3)
    c = env4.components("[L]", "tool", executed=True)  # box untouched -> psi kept -> s_pot 1
    assert c["s_pot"] == 1.0 and c["loc"] == pytest.approx(1.0)


def test_unknown_env_and_preset_are_errors():
    with pytest.raises(EnvError, match="name one of"):
        make_env({"name": "chess", "seed": 0})
    with pytest.raises(EnvError, match="unknown reward mixing preset"):
        mix_reward({"team": 0.0, "loc": 0.0}, "beta", "planpath")
    assert mix_reward({"team": 1.0}, "lambda", "planpath") == 0.5  # m = 0: local terms not computable


# ---- the verifiability mask (App. A.1.3-A.1.5: r = lambda r_team + (1 - lambda) m r_loc) ------------------------

UNPARSEABLE = "I am not sure what to do here."


@pytest.mark.parametrize("kind", ["planner", "tool"])
@pytest.mark.parametrize("name", ["sudoku", "planpath", "sokoban"])
def test_an_answer_that_cannot_be_parsed_has_mask_0_and_earns_no_local_reward(name, kind):
    """The paper's mask m = 1{we can parse the action and compute the sub-scores}: a reply without a grid, a
    step list or a move list gets m = 0, so only the team term is left (0 for an unchanged, unsolved state).
    Without the mask an unparseable Sudoku reply earned s_legal of the unchanged board (0.55), a Sokoban
    planner s_dlk (0.45) and every tool the potential it did not lower (0.5-0.6) plus s_exec."""
    from metaagent.envs import lambda_of

    env = make_env({"name": name, "seed": 2, "size": 4 if name == "sudoku" else 5})
    c = env.components(UNPARSEABLE, kind, executed=True)
    assert (mix_reward(c, "alpha", name), mix_reward(c, "lambda", name)) == (0.0, 0.0), c
    assert c["m"] == 0.0 and c["s_fmt"] == 0.0 and c["team"] == 0.0
    # the same env, a parseable (if useless) answer: m = 1 and the local terms count
    answer = "##### [[1, 1, 1]]" if name == "sudoku" else "##### [U]"
    c = env.components(answer, kind, executed=True)
    assert c["m"] == 1.0 and c["s_fmt"] == 1.0
    lam = lambda_of(name)
    assert mix_reward(c, "lambda", name) == pytest.approx(lam * c["team"] + (1 - lam) * c["loc"])


def test_the_turn_reward_of_an_unparseable_sudoku_reply_is_0():
    from metaagent.records import AgentTurn
    from metaagent.rewards.turn import get_turn_reward

    env = make_env({"name": "sudoku", "seed": 0, "size": 4})
    turn = AgentTurn(0, "PlanAgent", "s", [], UNPARSEABLE, None, [], [], None, "stop", "m")
    for preset in ("at_plan", "at_plan_lambda"):
        r = get_turn_reward(preset)({}, [], turn, env=env)
        assert r.total == 0.0, (preset, r)
        assert r.components["m"] == 0.0


# ---- the table of environments: every name list derives from it ------------------------------------------


def test_the_name_lists_derive_from_the_registered_environments():
    from metaagent.data import get_source
    from metaagent.envs import ENVS, env_names, lambda_of

    assert env_names() == ("planpath", "sokoban", "sudoku")
    assert {n: get_source(n).domain for n in env_names()} == dict.fromkeys(env_names(), "plan")
    assert [lambda_of(n) for n in env_names()] == [0.5, 0.4, 0.6] and lambda_of("math") == 0.7
    with pytest.raises(EnvError, match=r"no lambda for task 'chess'; known: \['math', 'planpath'"):
        lambda_of("chess")
    with pytest.raises(EnvError, match="already registered"):
        ENVS.register("planpath")(Sudoku)


def test_an_environment_registered_later_is_made_loaded_and_listed():
    """A plugin's environment: ``@register_env`` on its class gives its tasks (its data source follows from
    its name, the task text from its ``rules``), ``make_env`` and the lists; nothing else names it."""
    from metaagent.data import get_source, load_tasks, source_names
    from metaagent.data.sources import SOURCES
    from metaagent.envs import ENVS, PlanEnv, env_names, register_env

    class Counter(PlanEnv):
        name = "counter"
        rules = "Count up to {size}. Answer with the next number."
        default_size = 3
        lam = 0.5

        def __init__(self, spec):
            super().__init__(spec)
            self.size, self.value = int(spec.get("size", self.default_size)), int(spec["seed"]) % 2

        @property
        def success(self):
            return self.value >= self.size

        def observe(self):
            return f"value {self.value} of {self.size}"

        def apply(self, answer):
            self.value += 1
            return {}

    with pytest.raises(EnvError, match="needs its task text's rules"):
        register_env(type("Bare", (PlanEnv,), {"name": "bare"}))
    try:
        register_env(Counter)
        assert "counter" in env_names() and make_env({"name": "counter", "seed": 1}).observe() == "value 1 of 3"
        assert "counter" in source_names() and get_source("counter").domain == "plan"
        tasks = load_tasks({"source": "counter", "split": "test", "limit": 2})
        assert [t.domain for t in tasks] == ["plan", "plan"]
        assert tasks[0].question.startswith("Count up to 3. Answer with the next number.\n\nInitial state:\nvalue")
    finally:
        ENVS._table.pop("counter", None)
        SOURCES._table.pop("counter", None)
    with pytest.raises(EnvError, match=r"name one of \('planpath', 'sokoban', 'sudoku'\)"):
        make_env({"name": "counter", "seed": 1})
