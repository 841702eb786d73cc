"""The training kit shared by RL (``metaagent.train``), SFT (``metaagent.sft``) and replay: samples and
micro-batches, the optimizer and loss configuration, the losses (verl's ``core_algos`` ported; its policy-loss
registry takes plugins on the local backend), token
log-probs, checkpoints, metrics and trackers. It imports nothing above ``policy``."""
