"""The training kit shared by RL (``metaagent.train``), SFT (``metaagent.sft``) and replay: samples and
micro-batches, the optimizer and loss configuration, the losses (verl's ``core_algos`` ported), token
log-probs, checkpoints, metrics and trackers. It imports nothing above ``policy``."""
