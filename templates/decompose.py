# name: decompose
# structure: other
# pattern: decompose
# domains: math
# description: A decomposer splits the problem, solvers handle the parts in parallel, a synthesizer merges them.
decomposer = Agent("Decomposer", "You split a problem into two to four smaller subproblems, one per line, without solving them.")
solver = Agent("MathSolver", "You solve one subproblem exactly and give its result.", memory=False)
merger = Agent("Synthesizer", "You combine solved subproblems into a solution of the original problem. Put the final answer in \\boxed{}.")
parts = [p.strip() for p in decomposer(task).splitlines() if p.strip()][:4]
results = parallel(solver, [f"Problem:\n{task}\n\nSolve only this subproblem:\n{p}" for p in parts])
notes = "\n".join(f"- {p}: {r}" for p, r in zip(parts, results))
submit(merger(f"Problem:\n{task}\n\nSolved subproblems:\n{notes}"))
