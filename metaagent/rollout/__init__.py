"""Hierarchical rollout: M designs x N executions per task, recorded as versioned trees.

Modules: :mod:`.engine` (the M x N engine: designer calls, sandboxed executions, scoring), :mod:`.prompts`
(the designer's prompts), :mod:`.config` (``RolloutConfig``), :mod:`.metrics` (``rollout/*``), :mod:`.ray_pool`
(the sandbox pool on Ray actors), :mod:`.branching` (tree sampling inside a workflow, AT-GRPO), :mod:`.adaptive`
(the adaptive M x N budget), :mod:`.reexec` (re-running a recorded script with replies forced or agents
replaced), :mod:`.eval_aligned` (the post-rollout stage of evaluation-aligned credit).
"""
