# name: solver_tester
# structure: solver-tester
# pattern: solver-tester
# domains: code
# description: A coder writes a program, the public tests run it, the coder fixes failures (up to three rounds).
coder = Agent("CodeSolver", "You write a complete Python program for the task. Put the program in one ```python block.")
program = coder(task)
for _ in range(3):
    report = run_tests(program)
    if not report.startswith("FAIL"):
        break
    program = coder(f"Your program failed a public test:\n{report}\nFix it and return the whole program in one ```python block.")
submit(program)
