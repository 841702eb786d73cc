"""metaagent: train one LLM to design a multi-agent team for each task and to be its agents (end-to-end RL).

OpenMP threads that spin while they wait starve the sandbox workers and code-test processes that run next to
the model on small CPU machines, and on a shared machine they wait for descheduled siblings at every barrier
(measured on 2 cores at load average 12: one embedded-model decode step 15 s wall spinning, 0.8 s passive).
Passive waiting is therefore the default for every entry point that imports metaagent before torch (the
commands, the benchmarks, the tests); a user's own ``OMP_WAIT_POLICY`` wins.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
