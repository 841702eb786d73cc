# name: at_code_tester
# structure: solver-tester
# pattern: solver-tester
# domains: code
# description: AT-GRPO's coder + tester: the tester writes a test, the coder's program runs on it, both see the mismatch history; up to 4 turns, stop when the program passes.
coder = Agent("Coder", "You write a complete Python program that reads standard input and prints the answer. Put it in one ```python block.", memory=False)
tester = Agent("Tester", "You write one unit test for a programming problem: the input after a line 'Test Input:' and the expected output after a line 'Test Output:'.", memory=False)
history = ""
program = ""
for turn in range(4):
    program = coder(f"Problem:\n{task}{history}")
    test = tester(f"Problem:\n{task}\n\nCurrent program:\n{program}{history}")
    parts = test.split("Test Output:")
    test_input = parts[0].replace("Test Input:", "").strip()
    expected = parts[1].strip() if len(parts) > 1 else ""
    actual = run_program(program, test_input).strip()
    if expected and actual == expected:
        break
    history = f"{history}\n\nMismatch (turn {turn + 1}):\nProgram:\n{program}\nTest input:\n{test_input}\nExpected:\n{expected}\nActual:\n{actual}"
submit(program)
