# name: unity_code_reflect
# structure: solver-tester
# pattern: solver-tester
# domains: code
# description: UnityMAS-O's reflective verification loop: planner, coder, test verifier, reflector; up to 3 rounds, stop when the tests pass.
planner = Agent("Planner", "You plan a solution to a programming problem. Write short numbered pseudocode steps, using the reflection on earlier rounds if there is one.", memory=False)
coder = Agent("Coder", "You write a complete Python program that follows the pseudocode. Put the program in one ```python block.", memory=False)
reflector = Agent("Reflector", "You read a failing program and its test report and explain what went wrong and how the next round should fix it.", memory=False)
notes = ""
program = ""
for r in range(3):
    plan = planner(f"Problem:\n{task}\n\nReflections so far:\n{notes or '(none)'}\n\nRound {r + 1} of 3.")
    program = coder(f"Problem:\n{task}\n\nPseudocode:\n{plan}")
    report = run_tests(program)
    if report.startswith("PASS"):
        break
    if r < 2:
        notes += reflector(f"Problem:\n{task}\n\nProgram:\n{program}\n\nTest report:\n{report}") + "\n"
submit(program)
