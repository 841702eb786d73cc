"""Names shared by the model cache (:mod:`.models`) and the cold-start adapters (:mod:`.cold_start`).

Kept apart so that the adapters' module, which the cache builds on, does not import the cache back.
"""

from __future__ import annotations

#: the aliases of the embedded model with a shipped cold-start adapter merged in
COLD_START = "embedded-sft"
COLD_START_SUITE = "embedded-sft-suite"
#: a JSON file in a model (or adapter) folder, ``{"designer_prompt": "compact"}``: the designer prompt style
#: the model was trained on (written by metaagent-sft; read by metaagent.rollout.prompts)
PROMPT_FILE = "metaagent_prompt.json"
#: bump when the build recipe changes: a cached model with another version is rebuilt
BUILD_VERSION = 2
