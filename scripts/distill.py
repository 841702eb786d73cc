#!/usr/bin/env python
"""Thin wrapper: ``python scripts/distill.py ...`` is ``metaagent-distill ...`` (see its --help).

Example (teacher = DeepSeek, key in $DEEPSEEK_API_KEY):

    python scripts/distill.py --data bundled:train --out sft_data/deepseek --m-designs 4 --n-executions 2
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from metaagent.cli.distill import main

if __name__ == "__main__":
    main()
