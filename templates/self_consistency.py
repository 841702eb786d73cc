# name: self_consistency
# structure: ensemble
# pattern: self-consistency
# domains: math
# description: Five independent solutions; the most common final answer wins.
solver = Agent("MathSolver", "You solve math problems step by step. Put the final answer in \\boxed{}.", memory=False)
solutions = parallel(solver, [task] * 5)
best = majority([boxed(s) for s in solutions])
for s in solutions:
    if best and boxed(s) == best:
        submit(s)
submit(solutions[0])
