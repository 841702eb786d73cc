# name: ensemble_code
# structure: ensemble
# pattern: ensemble-judge
# domains: code
# description: Three coders with different approaches work in parallel; a judge returns the best program.
coders = [
    Agent("OptimalSolver", "You write an efficient Python program for the task. Put the program in one ```python block."),
    Agent("BruteForceSolver", "You write a simple, obviously correct Python program for the task. Put the program in one ```python block."),
    Agent("EdgeCaseSolver", "You write a Python program for the task that handles every edge case. Put the program in one ```python block."),
]
judge = Agent("CodeJudge", "You review candidate programs and return the one most likely to be correct, complete, in one ```python block.")
programs = parallel(coders, task)
listing = "\n\n".join(f"Candidate {i + 1}:\n{p}" for i, p in enumerate(programs))
submit(judge(f"Task:\n{task}\n\n{listing}"))
