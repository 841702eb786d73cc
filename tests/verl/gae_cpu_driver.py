"""One step of UnityMAS-O's GAE on the verl backend with ``verl.device=cpu``, recording what the trainer sent to
verl's critic and actor worker groups (run as a subprocess by ``test_verl_gae_cpu.py``: verl's CPU platform
patches are global inside a process).

    python tests/verl/gae_cpu_driver.py OUT [config overrides...]

Writes ``OUT/probe.json``:

- ``samples``: every trained sample (key, reward ``r``, prompt/response ids, the critic's values before the update,
  returns, token advantages);
- ``critic_batch`` / ``actor_batch``: per row the ``mas_key`` and the ``values``/``returns``/``advantages`` and
  ``response_mask`` rows that went to ``update_critic`` / ``update_actor``;
- ``values_after``: the critic's values of the same samples after the step (in memory), ``values_step0`` /
  ``values_step1`` after loading the step-0 (before the update) and step-1 checkpoints back into the workers.

The run directory (metrics, checkpoints ``step_00000000`` before and ``step_00000001`` after the update) is OUT/run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(batch, *fields: str) -> list[dict]:
    data, keys = batch.data.batch, batch.data.non_tensor_batch["mas_key"]
    pad = batch.data.non_tensor_batch["is_padding"]
    return [
        {"key": str(keys[i]), **{f: data[f][i].tolist() for f in fields}}
        for i in range(len(keys))
        if not pad[i]
    ]


def main(out: Path, overrides: list[str]) -> None:
    from metaagent.train.config import TrainConfig
    from metaagent.train.verl_backend.batch import build_update_batch
    from metaagent.train.verl_backend.checkpoint import load_verl_checkpoint
    from metaagent.train.loop import TrainLoop
    from metaagent.train.verl_backend.backend import VerlBackend

    cfg = TrainConfig.load("unity_code", [*overrides, f"trainer.out={out / 'run'}"])
    probe: dict = {}
    trained: list = []
    with TrainLoop(cfg, VerlBackend(cfg)) as trainer:
        group = trainer.backend.groups["policy"]
        trainer.save(0)  # the critic as verl initialised it (value head fresh, backbone = the policy's weights)
        update_critic, update, train_update = group.update_critic, group.update, trainer.backend.update

        def spy_critic(batch, *, step):
            probe["critic_batch"] = rows(batch, "values", "returns", "response_mask")
            return update_critic(batch, step=step)

        def spy_actor(batch, *, step):
            probe["actor_batch"] = rows(batch, "advantages", "response_mask")
            return update(batch, step=step)

        def spy_update(samples, step, active, pairs=()):
            trained.extend(samples)
            probe["samples"] = [
                {
                    "key": ",".join(map(str, s.key)), "reward": s.advantage, "prompt_ids": s.prompt_ids,
                    "response_ids": s.response_ids, "values": s.values, "returns": s.returns,
                    "token_advantages": s.token_advantages,
                }
                for s in samples
            ]  # fmt: skip
            return train_update(samples, step, active, pairs)

        group.update_critic, group.update, trainer.backend.update = spy_critic, spy_actor, spy_update
        trainer.train()

        def values() -> dict[str, list[float]]:
            batch = build_update_batch(trained, dp_size=group.dp_size, pad_id=group.pad_id)
            v = group.critic_values(batch)
            return {
                ",".join(map(str, trained[n].key)): v[row, : len(trained[n].response_ids)].tolist()
                for row, n in enumerate(batch.order)
                if n >= 0
            }

        probe["values_after"] = values()
        ckpts = out / "run" / "checkpoints"
        load_verl_checkpoint(ckpts / "step_00000000", groups=trainer.backend.groups, restore_rng=False)
        probe["values_step0"] = values()
        load_verl_checkpoint(ckpts / "step_00000001", groups=trainer.backend.groups, restore_rng=False)
        probe["values_step1"] = values()
    (out / "probe.json").write_text(json.dumps(probe))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
