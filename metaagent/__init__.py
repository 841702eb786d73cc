"""metaagent: train one LLM to design a multi-agent team for each task and to be its agents (end-to-end RL)."""

__version__ = "0.1.0"
