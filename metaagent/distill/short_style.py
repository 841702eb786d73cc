"""Short designer scripts for the embedded cold start (``make_cold_start_data.py --short``, issue #19 v4).

Why: at temperature 1.0 a 135M designer makes a mistake every so many tokens, and its valid replies were short
and its invalid ones long (README, "Designer cold start v3"). So ``--short`` trains on the shortest scripts that
still cover the bank's structure classes: :data:`SHORT_TEMPLATES` has one or two small templates per class
and domain (single, ensemble, reflection, debate, solver-tester, other), in plain style (no f-strings: ``+``
concatenation and ``"\\n\\n".join(...)``), with one to three agents, at most two rounds, and one short
sentence of system prompt per agent that says "math problems" / "coding tasks", which
:func:`metaagent.distill.variation.instantiate` with ``short=True`` replaces by the task's topic ("percentage
problems", "string tasks") and may close with one task-specific focus sentence ("Keep track of the apples.");
no topic-intro sentence and no role advice. Every template passes the workflow checker and is classified
(:func:`metaagent.workflow.analyze_script`) as the structure its header names; the tests check both.
"""

from __future__ import annotations

from metaagent.workflow.templates import Template, parse_template

_SOURCES = (
    r"""# name: short_single_math
# structure: single
# pattern: single
# domains: math
# description: One solver.
solver = Agent("MathSolver", "You solve math problems step by step and put the final answer in \\boxed{}.")
submit(solver(task))
""",
    r"""# name: short_ensemble_math
# structure: ensemble
# pattern: ensemble-judge
# domains: math
# description: Two solvers in parallel, a judge picks.
solvers = [
    Agent("AlgebraSolver", "You solve math problems with algebra."),
    Agent("StepSolver", "You solve math problems step by step."),
]
judge = Agent("MathJudge", "You pick the correct answer to math problems and give it in \\boxed{}.")
drafts = parallel(solvers, task)
submit(judge(task + "\n\n" + "\n\n".join(drafts)))
""",
    r"""# name: short_samples_math
# structure: ensemble
# pattern: ensemble-judge
# domains: math
# description: One solver sampled three times, a judge picks.
solver = Agent("MathSolver", "You solve math problems step by step and put the final answer in \\boxed{}.")
judge = Agent("MathJudge", "You pick the correct answer to math problems and give it in \\boxed{}.")
drafts = parallel(solver, [task] * 3)
submit(judge(task + "\n\n" + "\n\n".join(drafts)))
""",
    r"""# name: short_reflection_math
# structure: reflection
# pattern: reflection
# domains: math
# description: A solver drafts, a critic checks once, the solver fixes.
solver = Agent("MathSolver", "You solve math problems step by step and put the final answer in \\boxed{}.")
critic = Agent("MathCritic", "You check solutions to math problems and name the first error, or say CORRECT.")
draft = solver(task)
review = critic(task + "\n\n" + draft)
if "CORRECT" not in review:
    draft = solver("Fix your solution: " + review)
submit(draft)
""",
    r"""# name: short_verifier_math
# structure: reflection
# pattern: verifier
# domains: math
# description: A solver answers, a verifier checks, up to two rounds.
solver = Agent("MathSolver", "You solve math problems step by step and put the final answer in \\boxed{}.")
verifier = Agent("MathVerifier", "You verify answers to math problems and reply VALID or INVALID.")
answer = solver(task)
for _ in range(2):
    if "INVALID" not in verifier(task + "\n\n" + answer):
        break
    answer = solver("Your answer was wrong. Solve it again.")
submit(answer)
""",
    r"""# name: short_debate_math
# structure: debate
# pattern: debate
# domains: math
# description: Two debaters answer, read each other, answer again; the first answer is submitted.
debaters = [
    Agent("MathSolver", "You solve math problems step by step and put the final answer in \\boxed{}."),
    Agent("SkepticSolver", "You question answers to math problems and put the final answer in \\boxed{}."),
]
answers = parallel(debaters, task)
for _ in range(1):
    answers = parallel(debaters, task + "\n\nAnswers:\n" + "\n\n".join(answers))
submit(answers[0])
""",
    r"""# name: short_plan_math
# structure: other
# pattern: plan-solve
# domains: math
# description: A planner plans, a solver follows the plan.
planner = Agent("Planner", "You write a short plan for math problems and do not solve them.")
solver = Agent("MathSolver", "You solve math problems by the plan and put the final answer in \\boxed{}.")
plan = planner(task)
submit(solver(task + "\n\nPlan:\n" + plan))
""",
    r"""# name: short_tool_math
# structure: other
# pattern: tool-pair
# domains: math
# description: A coder's program computes, a solver answers with its output.
coder = Agent("PythonCoder", "You write a Python program that prints the answer to math problems.")
solver = Agent("MathSolver", "You solve math problems with the program output and put the final answer in \\boxed{}.")
output = run_program(coder(task))
submit(solver(task + "\n\nProgram output: " + output))
""",
    r"""# name: short_single_code
# structure: single
# pattern: single
# domains: code
# description: One coder.
coder = Agent("CodeSolver", "You write a Python program for coding tasks in one ```python block.")
submit(coder(task))
""",
    r"""# name: short_ensemble_code
# structure: ensemble
# pattern: ensemble-judge
# domains: code
# description: Two coders in parallel, a judge returns the best program.
coders = [
    Agent("SimpleCoder", "You write a simple Python program for coding tasks in one ```python block."),
    Agent("CarefulCoder", "You write a careful Python program for coding tasks in one ```python block."),
]
judge = Agent("CodeJudge", "You return the best program for coding tasks in one ```python block.")
programs = parallel(coders, task)
submit(judge(task + "\n\n" + "\n\n".join(programs)))
""",
    r"""# name: short_reflection_code
# structure: reflection
# pattern: reflection
# domains: code
# description: A coder writes, a reviewer checks once, the coder fixes.
coder = Agent("CodeSolver", "You write a Python program for coding tasks in one ```python block.")
reviewer = Agent("CodeReviewer", "You review programs for coding tasks and name the bugs, or say CORRECT.")
program = coder(task)
review = reviewer(task + "\n\n" + program)
if "CORRECT" not in review:
    program = coder("Fix your program: " + review)
submit(program)
""",
    r"""# name: short_tester_code
# structure: solver-tester
# pattern: solver-tester
# domains: code
# description: A coder writes, the public tests run, the coder fixes (up to two rounds).
coder = Agent("CodeSolver", "You write a Python program for coding tasks in one ```python block.")
program = coder(task)
for _ in range(2):
    report = run_tests(program)
    if report.startswith("PASS"):
        break
    program = coder("Fix your program: " + report)
submit(program)
""",
)

#: the short template bank (see the module docstring)
SHORT_TEMPLATES: tuple[Template, ...] = tuple(
    parse_template(s, f"<short:{i}>") for i, s in enumerate(_SOURCES)
)

#: short templates added for the structure-sensitive suite's tasks only (``make_cold_start_data.py --suite``), so
#: the bundled tasks' designer examples stay those of v4/v5: the bank's sample_tests, shortened
SUITE_SHORT_TEMPLATES: tuple[Template, ...] = (
    parse_template(
        r"""# name: short_samples_code
# structure: solver-tester
# pattern: solver-tester
# domains: code
# description: Three coders write programs independently; the first that passes the public tests is submitted.
coder = Agent("CodeSolver", "You write a Python program for coding tasks in one ```python block.", memory=False)
programs = parallel(coder, [task] * 3)
for program in programs:
    if run_tests(program).startswith("PASS"):
        submit(program)
submit(programs[0])
""",
        "<short:suite:0>",
    ),
)
