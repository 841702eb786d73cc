# name: single_math
# structure: single
# pattern: single
# domains: math
# description: One solver answers the problem directly.
solver = Agent("MathSolver", "You solve math problems step by step. Put the final answer in \\boxed{}.")
submit(solver(task))
