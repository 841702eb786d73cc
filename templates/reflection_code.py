# name: reflection_code
# structure: reflection
# pattern: reflection
# domains: code
# description: A coder writes a program, a reviewer looks for bugs, the coder fixes them (up to two rounds).
coder = Agent("CodeSolver", "You write a complete Python program for the task. Put the program in one ```python block.")
reviewer = Agent("CodeReviewer", "You review a program for bugs, wrong input/output handling and slow parts. Name the problems, or say CORRECT.")
program = coder(task)
for _ in range(2):
    review = reviewer(f"Task:\n{task}\n\nProgram:\n{program}")
    if "CORRECT" in review:
        break
    program = coder(f"Fix your program using this review and return the whole program:\n{review}")
submit(program)
