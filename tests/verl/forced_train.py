"""``train-metaagent`` with scripted reply texts (run as a subprocess by the verl CPU tests: verl's platform
patches are global inside a process, so those runs cannot be in-process).

    python tests/verl/forced_train.py [train-metaagent arguments...]

Every ``HFPolicy`` of the process (the CPU rollout runs in the driver) answers through
``tests/builders.py::forced_generate``: an agent delivers ``\\boxed{3}`` in the tag on even request seeds and
answers untagged on odd ones; a designer writes a valid one-agent script on even seeds and one the checker
refuses on odd ones (tests/train/warm_tiny.py's ``SCRIPT`` and ``BROKEN``). The seeds are derived from the run
seed, so each step's rewards vary the same way on every machine and verl really updates; tokens, log-probs and
the update are the model's own.
"""

from __future__ import annotations

import sys
from pathlib import Path

from metaagent.lazy import import_file
from metaagent.policy.hf import HFPolicy

TESTS = Path(__file__).resolve().parents[1]
builders = import_file(TESTS / "builders.py", "builders")
warm_tiny = import_file(TESTS / "train" / "warm_tiny.py", "warm_tiny")  # the reply texts
TAGGED, UNTAGGED = warm_tiny.TAGGED, warm_tiny.UNTAGGED
VALID, BROKEN = (f"```python\n{script}```" for script in (warm_tiny.SCRIPT, warm_tiny.BROKEN))


def scripted(request) -> str:
    even = builders.seed_of(request) % 2 == 0
    if request.role == "designer":
        return VALID if even else BROKEN
    return TAGGED if even else UNTAGGED


if __name__ == "__main__":
    from metaagent.cli.train import main

    HFPolicy._generate = builders.forced_generate(scripted)
    sys.exit(main(sys.argv[1:]))
