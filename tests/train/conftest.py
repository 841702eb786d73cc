"""Fixtures of the training tests: the tiny Llama, samples and token-carrying rollout trees (tests/builders.py)."""

from builders import make_model, make_samples, make_token_tree, model  # noqa: F401  (fixtures, defined once)
