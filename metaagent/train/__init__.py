"""RL training (paper §3): ``train-metaagent``, the loop ``TrainLoop(config, backend)`` over two backends.

Modules: :mod:`.config` (``TrainConfig``, one dataclass per section), :mod:`.schedule` (which roles learn at a
step, Eq. 9), :mod:`.loop` (the loop both backends share: data, rollout, credit, samples, run directory),
:mod:`.backend` (the ``Backend`` protocol), :mod:`.roles` (which physical model plays which role),
:mod:`.reward_stages` (what is written into the records between the rollout and the estimator),
:mod:`.token_stage` (per-token advantages finished in the trainer), :mod:`.dynamic_sampling` (DAPO's per-role
resampling); the backends :mod:`.local` (one process, CPU or one GPU) and :mod:`.verl_backend` (verl on GPUs).
"""
