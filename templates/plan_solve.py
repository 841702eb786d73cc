# name: plan_solve
# structure: other
# pattern: plan-solve
# domains: math
# description: A planner writes a short plan; a solver follows it.
planner = Agent("Planner", "You read a math problem and write a short numbered plan of the steps to solve it. Do not solve it.")
solver = Agent("MathSolver", "You solve math problems by following the given plan step by step. Put the final answer in \\boxed{}.")
plan = planner(task)
submit(solver(f"Problem:\n{task}\n\nPlan:\n{plan}"))
