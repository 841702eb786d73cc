# name: single_plan
# structure: single
# pattern: single
# domains: plan
# description: One planner answers a planning puzzle once (AT-GRPO's single-agent baseline).
plan = Agent("PlanAgent", "You solve planning puzzles. Give the final answer on a line starting with ##### followed by the move list (e.g. [U, R]) or the grid.")
final = plan(f"Task:\n{task}\n\nCurrent state:\n{env_observe()}")
env_step(final)
submit(final)
