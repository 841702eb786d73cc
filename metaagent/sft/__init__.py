"""The supervised cold start (paper §4.1, App. A): ``metaagent-sft`` fine-tunes on chat examples.

Modules: :mod:`.data` (chat ``messages`` JSONL to token ids, tokenised exactly as the rollout does),
:mod:`.trainer` (``SFTConfig`` and the trainer: NLL of the assistant tokens only, LoRA or full weights),
:mod:`.eval` (how often a designer writes a valid workflow script), :mod:`.warm` (a warm start in one call, for
the CPU demos and the learning tests). A peer of ``train/``: it shares the training kit of :mod:`metaagent.learn`.
"""
