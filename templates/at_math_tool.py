# name: at_math_tool
# structure: other
# pattern: tool-pair
# domains: math
# description: AT-GRPO's reasoner + Python tool agent: both answer, each sees the other's previous answer; up to 4 turns, stop when the two answers agree.
reasoner = Agent("Reasoner", "You solve math problems step by step and put the final answer in \\boxed{}.", memory=False)
tool = Agent("ToolAgent", "You write a short Python program in a ```python block that prints only the final answer of a math problem; the result is then given in \\boxed{}.", memory=False)
notes = ""
answer = ""
for turn in range(4):
    answer = reasoner(f"Problem:\n{task}{notes}")
    code = tool(f"Problem:\n{task}{notes}")
    shown = run_program(code).strip()
    if shown and boxed(answer) == shown:
        break
    notes = f"\n\nPrevious reasoner answer:\n{answer}\nPrevious program output:\n{shown}"
submit(answer)
