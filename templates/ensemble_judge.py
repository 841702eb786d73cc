# name: ensemble_judge
# structure: ensemble
# pattern: ensemble-judge
# domains: math
# description: Three solvers with different strategies work in parallel; a judge picks the correct answer.
solvers = [
    Agent("AlgebraicSolver", "You solve the problem with algebraic manipulation. Put the final answer in \\boxed{}."),
    Agent("CombinatorialSolver", "You solve the problem by counting and case analysis. Put the final answer in \\boxed{}."),
    Agent("BruteForceSolver", "You solve the problem by checking small cases and finding the pattern. Put the final answer in \\boxed{}."),
]
judge = Agent("MathJudge", "You compare candidate solutions, find the correct one and give its final answer in \\boxed{}.")
drafts = parallel(solvers, task)
candidates = "\n\n".join(f"Candidate {i + 1}:\n{d}" for i, d in enumerate(drafts))
submit(judge(f"Problem:\n{task}\n\n{candidates}\n\nWhich candidate is correct? Give its final answer in \\boxed{{}}."))
