# name: single_plan_tool
# structure: other
# pattern: tool-pair
# domains: plan
# description: One tool agent writes a program whose printed output is the answer to a planning puzzle, applied once (AT-GRPO Table 3: the tool agent trained and evaluated alone).
tool = Agent("ToolAgent", "You write ONE short Python program in a ```python block that prints only the answer to a planning puzzle: a move list like [U, R, D] or, for Sudoku, the grid or fill steps as JSON.", memory=False)
code = tool(f"Task:\n{task}\n\nCurrent state:\n{env_observe()}")
output = run_program(code)
env_step(output)
submit(output)
