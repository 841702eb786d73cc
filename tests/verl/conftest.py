"""Fixtures of the verl-backend tests; the builders live in verl_helpers.py."""

from __future__ import annotations

import pytest
from verl_helpers import mixed_trees


@pytest.fixture
def trees():
    return mixed_trees()
