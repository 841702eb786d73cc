"""Credit tests build rollout trees from reward matrices (tests/builders.py)."""

from __future__ import annotations

import pytest
from builders import make_tree


@pytest.fixture(name="make_tree")
def _make_tree():
    """``make_tree(rows, task_id)``: one agent role per execution, as the credit tests read the calls."""
    return lambda rows, task_id="t": make_tree(rows, task_id, roles=("Solver",))
