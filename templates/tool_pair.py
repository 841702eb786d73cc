# name: tool_pair
# structure: other
# pattern: tool-pair
# domains: math
# description: A coder writes a program that computes the answer, the program runs, a reasoner checks and answers.
coder = Agent("PythonCoder", "You write a short Python program that computes what is asked and prints the result. Put it in one ```python block.")
reasoner = Agent("MathReasoner", "You reason about a math problem, use computed results you are given, and put the final answer in \\boxed{}.")
program = coder(f"Write a program that computes the answer to this problem:\n{task}")
output = run_program(program)
submit(reasoner(f"Problem:\n{task}\n\nA program computed:\n{output}\n\nCheck this against your own reasoning and give the final answer in \\boxed{{}}."))
