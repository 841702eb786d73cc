"""Fixtures of the workflow tests: one shared sandbox pool and a role-aware scripted policy."""

from __future__ import annotations

import pytest
from wf_helpers import FAST, role_reply

from metaagent.policy import ScriptedPolicy
from metaagent.workflow import SandboxPool


@pytest.fixture(scope="session")
def pool():
    """Two workers shared by the workflow tests (workers are replaced after kills)."""
    with SandboxPool(workers=2, limits=FAST) as p:
        p.warm()
        yield p


@pytest.fixture
def scripted():
    return ScriptedPolicy(role_reply)
