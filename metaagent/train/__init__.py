"""RL training (paper §3): ``train-metaagent``, the loop ``TrainLoop(config)`` over the backend it names.

Modules: :mod:`.config` (``TrainConfig``, one dataclass per section; ``ScheduleConfig.build()`` is the one
schedule), :mod:`.backend_sections` (the backends' config sections, below both: ``verl:``), :mod:`.schedule`
(which roles learn at a step, Eq. 9), :mod:`.loop` (the loop every backend shares: data, rollout, credit,
samples), :mod:`.run_dir` (the run directory: layout, a fresh run moving an earlier one aside, ``--resume``'s
checkpoint, run.json), :mod:`.backend` (the ``Backend`` base class and the backends by name: ``BACKENDS``,
``make_backend(config)``; ``trainer.backend: local|verl`` or a plugin's), :mod:`.errors`, :mod:`.roles` (which physical model plays which role),
:mod:`.reward_stages` (what is written into the records between the rollout and the estimator),
:mod:`.token_stage` (per-token advantages finished in the trainer), :mod:`.dynamic_sampling` (DAPO's per-role
resampling); the backends :mod:`.local` (one process, CPU or one GPU) and :mod:`.verl_backend` (verl on GPUs).
"""
