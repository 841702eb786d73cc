# name: single_code
# structure: single
# pattern: single
# domains: code
# description: One coder writes the program directly.
coder = Agent("CodeSolver", "You write a complete, correct Python solution that follows the task's input/output format exactly. Put the program in one ```python block.")
submit(coder(task))
