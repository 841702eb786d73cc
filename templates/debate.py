# name: debate
# structure: debate
# pattern: debate
# domains: math
# description: Two solvers answer, read each other's answers and update for two rounds; a judge decides.
debaters = [
    Agent("MathSolver", "You solve the problem step by step and defend or correct your answer when others disagree. Put the final answer in \\boxed{}."),
    Agent("SkepticalSolver", "You solve the problem independently and look for flaws in other answers. Put the final answer in \\boxed{}."),
]
judge = Agent("MathJudge", "You read a debate about a problem and give the correct final answer in \\boxed{}.")
answers = parallel(debaters, task)
for _ in range(2):
    debate = "\n\n".join(f"{d.name}: {a}" for d, a in zip(debaters, answers))
    answers = parallel(debaters, f"Problem:\n{task}\n\nAnswers so far:\n{debate}\n\nUpdate your solution.")
final = "\n\n".join(f"{d.name}: {a}" for d, a in zip(debaters, answers))
submit(judge(f"Problem:\n{task}\n\nDebate:\n{final}"))
