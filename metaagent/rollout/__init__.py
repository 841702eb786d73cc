"""Hierarchical rollout: M designs x N executions per task, recorded as versioned trees."""
