"""Command-line entry points.

OpenMP threads that spin while waiting starve the sandbox workers and code-test processes that run next to
the model on small CPU machines; passive waiting costs nothing measurable when the cores are free. Set
before torch is imported (a user's own setting wins).
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
