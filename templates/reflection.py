# name: reflection
# structure: reflection
# pattern: reflection
# domains: math
# description: A solver drafts, a critic names the first error, the solver revises (up to two rounds).
solver = Agent("AlgebraSolver", "You solve competition math step by step. Put the final answer in \\boxed{}.")
critic = Agent("MathCritic", "You check a proposed solution line by line and name the first error, or say CORRECT.")
draft = solver(task)
for _ in range(2):
    review = critic(f"Problem:\n{task}\n\nProposed solution:\n{draft}")
    if "CORRECT" in review:
        break
    draft = solver(f"Revise your solution using this review:\n{review}")
submit(draft)
