"""Fixtures of the training-kit tests (metaagent/learn/): the shared builders (tests/builders.py) of the tiny
Llama, samples and token-carrying rollout trees."""

from __future__ import annotations

import pytest
from builders import make_tree, random_samples, tiny_llama


@pytest.fixture
def model():
    return tiny_llama()


@pytest.fixture
def make_samples():
    return random_samples


@pytest.fixture
def make_token_tree():
    return make_tree


@pytest.fixture
def make_model():
    return tiny_llama
