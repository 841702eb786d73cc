# name: solver_verifier
# structure: reflection
# pattern: verifier
# domains: math
# description: A verifier checks each solution independently; a rejected solution is solved again.
solver = Agent("MathSolver", "You solve math problems step by step. Put the final answer in \\boxed{}.", memory=False)
verifier = Agent("MathVerifier", "You verify a proposed solution independently. Reply VALID if its final answer is right, otherwise INVALID and the reason.")
answer = solver(task)
for _ in range(2):
    verdict = verifier(f"Problem:\n{task}\n\nProposed solution:\n{answer}")
    if "INVALID" not in verdict:
        break
    answer = solver(f"{task}\n\nA previous attempt was rejected: {verdict}\nSolve the problem again carefully.")
submit(answer)
