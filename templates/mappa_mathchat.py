# name: mappa_mathchat
# structure: other
# pattern: tool-pair
# domains: math
# description: MAPPA's MathChat: a problem solver drafts, a code executor computes with Python (its program runs and it sees the output), a verifier gives the final answer.
solver = Agent("ProblemSolver", "You are Problem Solver in a 3-agent system:\nProblem Solver (you) -> Code Executor -> Verifier.\nThe system succeeds only if the Verifier (final agent) outputs the correct answer. Your job is to draft a solution to the problem.")
coder = Agent("CodeExecutor", "You are Code Executor in a 3-agent system:\nProblem Solver -> Code Executor (you) -> Verifier.\nThe system succeeds only if the Verifier (final agent) outputs the correct answer. Your job is to compute/verify the solution using Python code.\nYou can execute Python code. Write code in a ```python block inside your delivery and it will be automatically executed on your behalf, based on which you can iterate further or output final answers.")
verifier = Agent("Verifier", "You are Verifier, the final agent in a 3-agent system:\nProblem Solver -> Code Executor -> Verifier (you).\nYou are the last agent. The system succeeds only if YOU output the correct answer. Evaluate the information below and provide the final answer. Output your final answer as: **\\boxed{answer}** (the answer inside \\boxed{}).")
draft = solver(f"## Problem\n{task}")
out = coder(f"## Problem\n{task}\n\n## Input from Problem Solver\n{draft}")
for _ in range(1):  # coder_max_turns = 2 (the authors' config; Table 7 says 5): one more round after a program
    if "```python" not in out:
        break
    out = coder(f"Execution result:\n{run_program(out)}")
submit(verifier(f"## Problem\n{task}\n\n## Input from Code Executor\n{out}"))
