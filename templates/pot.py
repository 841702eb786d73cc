# name: pot
# structure: other
# pattern: tool-pair
# domains: math
# description: Program of thought: tool_pair's coder writes a program that computes the answer, the program runs, and its last printed line is submitted (no second agent).
coder = Agent("PythonCoder", "You write a short Python program that computes what is asked and prints the result. Put it in one ```python block.")
program = coder(f"Write a program that computes the answer to this problem:\n{task}")
output = run_program(program)
lines = [line.strip() for line in output.splitlines() if line.strip()]
answer = lines[-1] if lines else ""
final = f"\\boxed{{{answer}}}"
submit(final)
