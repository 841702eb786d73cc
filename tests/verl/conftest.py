"""Fixtures of the verl-backend tests; the builders live in tests/builders.py."""

from __future__ import annotations

import pytest
from builders import mixed_trees


@pytest.fixture
def trees():
    return mixed_trees()
