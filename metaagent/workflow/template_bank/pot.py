# name: pot
# structure: other
# pattern: tool-pair
# domains: math
# description: Program of thought: one coder writes a program that prints the answer; its printed output is submitted.
coder = Agent("PythonCoder", "You write a short Python program that computes what is asked and prints only the final answer. Put it in one ```python block.")
program = coder(f"Write a program that computes the answer to this problem and prints only the final answer:\n{task}")
output = run_program(program)
lines = [line.strip() for line in output.splitlines() if line.strip()]
answer = lines[-1] if lines else ""
submit(f"\\boxed{{{answer}}}")
