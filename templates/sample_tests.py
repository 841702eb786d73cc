# name: sample_tests
# structure: solver-tester
# pattern: solver-tester
# domains: code
# description: Four coders write programs independently; the first that passes the public tests is submitted.
coder = Agent("CodeSolver", "You write a complete Python program for the task. Put the program in one ```python block.", memory=False)
programs = parallel(coder, [task] * 4)
for program in programs:
    if run_tests(program).startswith("PASS"):
        submit(program)
submit(programs[0])
