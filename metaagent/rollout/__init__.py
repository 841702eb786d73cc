"""Hierarchical rollout: M designs x N executions per task, recorded as versioned trees.

Modules: :mod:`.engine` (the M x N engine: designer calls, sandboxed executions, scoring, and the
budget-matched single-agent controls of ``algo.designer_baseline: control``), :mod:`.prompts` (the designer's
prompts, with or without the domain line: ``rollout.domain_hint``), :mod:`.budget` (the LOW / HIGH budget tag and
LOW's cap on agent calls), :mod:`.config` (``RolloutConfig``), :mod:`.metrics` (``rollout/*``), :mod:`.ray_pool`
(the sandbox pool on Ray actors), :mod:`.branching` (tree sampling inside a workflow, AT-GRPO), :mod:`.adaptive`
(the adaptive M x N budget), :mod:`.reexec` (re-running a recorded script with replies forced or agents
replaced), :mod:`.eval_aligned` (the post-rollout stage of evaluation-aligned credit).
"""
