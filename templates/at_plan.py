# name: at_plan
# structure: other
# pattern: tool-pair
# domains: plan
# description: AT-GRPO's tool + planner team for planning puzzles: a tool agent's program proposes, a planner answers, the environment applies it; up to 4 turns, stop when solved.
tool = Agent("ToolAgent", "You write ONE short Python program in a ```python block that prints only the answer to a planning puzzle: a move list like [U, R, D] or, for Sudoku, the grid or fill steps as JSON.", memory=False)
plan = Agent("PlanAgent", "You solve planning puzzles. Check the tool's output against the rules and the current state, then give the final answer on a line starting with ##### followed by the move list (e.g. [U, R]) or the grid.", memory=False)
feedback = ""
final = ""
for turn in range(4):
    state = env_observe()
    code = tool(f"Task:\n{task}\n\nCurrent state:\n{state}{feedback}")
    output = run_program(code)
    final = plan(f"Task:\n{task}\n\nCurrent state:\n{state}\n\nTool code:\n{code}\n\nTool output:\n{output}{feedback}")
    result = env_step(final)
    if result.startswith("SOLVED"):
        break
    feedback = f"\n\nPrevious answer:\n{final}\nResult:\n{result}"
submit(final)
