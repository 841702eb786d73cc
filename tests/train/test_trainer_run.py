"""The local trainer end to end on warm-started tiny models (see warm_tiny.py):

- 4 steps with K = 2 pass through an executor stage and a designer stage, each updating only its own model,
  and write metrics, rollouts and checkpoints;
- resuming from the step-2 checkpoint reproduces steps 3-4 exactly (metrics, rollouts and weights);
- a learning run (executor_only, frozen one-agent design): the executor learns to deliver in the tag, and
  the mean reward rises.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from warm_tiny import SCRIPT, TRAIN_SPEC, warm_tiny

from metaagent.eval.metrics import slope_ci
from metaagent.train.config import TrainConfig
from metaagent.train.metrics import read_metrics
from metaagent.train.trainer import Trainer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("warm")
    return {"designer": warm_tiny(root, "designer"), "executor": warm_tiny(root, "executor")}


def _config(out: Path, warm: dict[str, str], *extra: str) -> TrainConfig:
    return TrainConfig.load(
        None,
        [
            "policy.weights=separate",
            f"policy.designer_model={warm['designer']}",
            f"policy.executor_model={warm['executor']}",
            "policy.max_batch_size=16",
            f"data.train=[{json.dumps(TRAIN_SPEC)}]",
            "data.val=[]",
            "data.batch_size=2",
            "rollout.m_designs=2",
            "rollout.n_executions=2",
            "rollout.k_templates=1",
            "rollout.designer.max_tokens=40",
            "rollout.executor.max_tokens=16",
            "rollout.executor.stop=['</delivery>']",
            "rollout.sandbox_workers=2",
            "schedule.mode=stagewise",
            "schedule.stage_len=2",
            "optim.lr=1e-3",
            "trainer.steps=4",
            "trainer.save_every=2",
            "trainer.tensorboard=false",
            f"trainer.out={out}",
            *extra,
        ],
    )


def _params(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {f"{k}.{n}": p.detach().clone() for k, m in trainer.models.models.items() for n, p in m.named_parameters()}


def _strip(row: dict) -> dict:
    """A metrics row without wall-clock measurements (seconds, throughput)."""
    return {k: v for k, v in row.items() if not (k.startswith("time/") or k.endswith(("_s", "_per_s")))}


# an entropy bonus makes every active sample pull on the weights, even where a group's rewards tie; static
# batching: with continuous batching (the default) which rows decode together depends on timing, so the rollouts
# of a resumed run match the first run's only up to float noise
RESUME = ("optim.entropy_coef=0.01", "policy.continuous=false")


# policy.lora: each model key is a LoRA adapter on its frozen base; checkpoints hold only the adapters; the KL
# reference is that base with the adapter off (no copy loaded)
LORA = ("policy.lora.enabled=true", "policy.lora.rank=4", "policy.lora.alpha=8", "optim.lr=1e-2", "optim.kl_coef=0.05")


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_four_steps_two_stages_then_exact_resume(tmp_path, warm, lora):
    out = tmp_path / "run"
    extra = (*RESUME, *(LORA if lora else ()))
    with Trainer(_config(out, warm, *extra)) as trainer:
        if lora:
            assert all(u.ref_model is None and u.has_reference for u in trainer.updaters.values())
        before = _params(trainer)
        after: dict[int, dict[str, torch.Tensor]] = {}
        trainer.train(on_step=lambda r: after.__setitem__(r.step, _params(trainer)))
    rows = [r for r in read_metrics(out / "metrics.jsonl")[0] if r["step"] >= 0]
    assert [r["schedule/active"] for r in rows] == ["executor", "executor", "designer", "designer"]

    # executor stage: only the executor model moves; designer stage: only the designer model
    def moved(a, b, prefix):
        return any(not torch.equal(a[k], b[k]) for k in a if k.startswith(prefix))

    if lora:  # only LoRA weights move, and the checkpoints are adapter folders
        assert not any(not torch.equal(before[k], after[3][k]) for k in before if "lora_" not in k)
        assert (out / "checkpoints" / "step_00000002" / "models" / "executor" / "adapter_config.json").is_file()
        assert rows[0]["train/executor/ref_kl"] == pytest.approx(0.0, abs=1e-7)  # B = 0: the policy is its base
        assert rows[1]["train/executor/ref_kl"] > 0  # the executor adapter moved at step 0

    assert moved(before, after[1], "executor") and not moved(before, after[1], "designer")
    assert moved(after[1], after[3], "designer") and not moved(after[1], after[3], "executor")
    for r in rows:
        active = r["schedule/active"]
        other = "designer" if active == "executor" else "executor"
        assert r[f"samples/{active}"] > 0 and r.get(f"samples/{other}", 0) == 0
    assert all(r["rollout/valid_script_rate"] > 0 for r in rows)  # the warm designer writes runnable scripts
    assert sorted(p.name for p in (out / "rollouts").iterdir()) == [f"step_{s:06d}.jsonl" for s in range(4)]
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.is_dir())[-2:] == ["step_00000002", "step_00000004"]

    # resume from the step-2 checkpoint in a copy of the run directory: steps 3-4 again, bit for bit
    copy = tmp_path / "resumed"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("step_00000004"))
    with Trainer(_config(copy, warm, *extra), resume=str(copy / "checkpoints" / "step_00000002")) as trainer:
        assert trainer.start_step == 2
        trainer.train()
        resumed = _params(trainer)
    assert all(torch.equal(resumed[k], after[3][k]) for k in resumed)
    again = [r for r in read_metrics(copy / "metrics.jsonl")[0] if r["step"] >= 2]
    for a, b in zip(again, rows[2:], strict=True):
        a, b = _strip(a), _strip(b)
        assert a == b, {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    for s in (2, 3):
        first = [json.loads(x) for x in (out / "rollouts" / f"step_{s:06d}.jsonl").read_text().splitlines()]
        second = [json.loads(x) for x in (copy / "rollouts" / f"step_{s:06d}.jsonl").read_text().splitlines()]
        key = lambda t: [[(e["answer"], [turn["response"] for turn in e["turns"]]) for e in d["executions"]] for d in t["designs"]]  # noqa: E731
        assert [key(t) for t in first] == [key(t) for t in second]


def test_executor_learns_the_delivery_format(tmp_path, warm):
    script = tmp_path / "solver.py"
    script.write_text(SCRIPT)
    cfg = _config(
        tmp_path / "learn",
        warm,
        "schedule.mode=executor_only",
        f"rollout.frozen_designer={script}",
        "rollout.m_designs=1",
        "rollout.n_executions=8",
        "data.batch_size=4",
        "trainer.steps=16",
        "trainer.save_every=0",
    )
    with Trainer(cfg) as trainer:
        results = trainer.train()
    reward = [r.metrics["rollout/reward/executor"] for r in results]
    delivery = [r.metrics["rollout/delivery_rate"] for r in results]
    print("reward curve:", " ".join(f"{x:.2f}" for x in reward))
    print("delivery curve:", " ".join(f"{x:.2f}" for x in delivery))
    # first 4 steps against the second half of the run: at lr 1e-3 single late steps are noisy. Measured with
    # the warm start's data order (warm_tiny._seeded_order): delivery 0.40 -> 0.71, reward 0.20 -> 0.35; the
    # rise is asserted, not a level (a warm start that already delivers 80% has no room to show one)
    first, later = sum(reward[:4]) / 4, sum(reward[8:]) / 8
    assert later > first + 0.05, reward
    assert sum(delivery[8:]) / 8 > sum(delivery[:4]) / 4 + 0.15, delivery


def test_designer_learns_to_write_valid_scripts(tmp_path, warm):
    """designer_only on a designer warm-started on valid and refused scripts (it writes few valid ones at T=1)
    (compact prompt): the refused design earns 0 (paper: invalid design -> 0), the valid one the mean reward of
    its executions, so GRPO over the M designs of a task raises the valid-script rate."""
    designer = warm_tiny(tmp_path / "warm_mixed", "designer_mixed")
    executor = warm_tiny(tmp_path / "warm_tagged", "executor_tagged")  # valid designs nearly always earn R > 0
    cfg = _config(
        tmp_path / "learn",
        {"designer": designer, "executor": executor},
        "schedule.mode=designer_only",
        "rollout.designer_prompt=compact",
        "rollout.m_designs=8",
        "rollout.n_executions=1",
        "data.batch_size=4",
        "optim.lr=1e-3",
        "trainer.steps=16",
        "trainer.save_every=0",
    )
    with Trainer(cfg) as trainer:
        assert trainer.engine.designer_prompt == "compact"
        results = trainer.train()
    valid = [r.metrics["rollout/valid_script_rate"] for r in results]
    reward = [r.metrics["rollout/reward/designer"] for r in results]
    print("valid-script rate curve:", " ".join(f"{x:.2f}" for x in valid))
    print("designer reward curve:", " ".join(f"{x:.2f}" for x in reward))
    # both rise: the 95% t interval of the least-squares slope over the 16 steps lies above 0. Measured
    # (2026-11-27): valid 0.12 0.16 0.19 0.12 0.25 0.25 0.16 0.16 0.28 0.22 0.38 0.25 0.22 0.31 0.28 0.53, slope
    # +0.016 [+0.007, +0.025] a step; reward slope +0.0066 [+0.0030, +0.0102]. With the 50/50 executor (a valid
    # design then often earns 0 too) the same run's valid slope was +0.010 [-0.0002, +0.021]: too weak a signal
    valid_slope, reward_slope = slope_ci(list(enumerate(valid))), slope_ci(list(enumerate(reward)))
    assert valid_slope[1] > 0, (valid_slope, valid)
    assert reward_slope[1] > 0, (reward_slope, reward)
    assert sum(valid[8:]) / 8 > sum(valid[:4]) / 4 + 0.1, valid  # measured: 0.15 -> 0.31


def test_a_fresh_run_moves_an_earlier_run_aside(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"run_id": "old-1"}))
    (out / "metrics.jsonl").write_text('{"step": 0}\n')
    cfg = TrainConfig.load(str(Path(__file__).parents[2] / "configs" / "tiny.yaml"), [f"trainer.out={out}"])
    with Trainer(cfg):
        pass
    assert (tmp_path / "run.old-1" / "metrics.jsonl").read_text() == '{"step": 0}\n'  # kept, not appended to
    info = json.loads((out / "run.json").read_text())
    assert info["run_id"] != "old-1"
    from metaagent.execution import isolation

    assert info["isolation"]["layer"] == isolation.active().layer  # the layer model-written code ran under
    assert not (out / "metrics.jsonl").exists() or (out / "metrics.jsonl").read_text() == ""


def test_continuous_batching_option_reaches_the_rollout_policy():
    import threading

    from metaagent.policy import ChatRequest, SamplingParams
    from metaagent.train.config import PolicyConfig
    from metaagent.train.models import load_models

    models = load_models(PolicyConfig(model="tiny", continuous=True, max_batch_size=4))
    try:
        policy = models.designer
        assert policy.backend.continuous and policy.max_in_flight > 1
        out: dict[int, str] = {}

        def call(i: int) -> None:
            req = ChatRequest([{"role": "user", "content": f"q{i}"}], SamplingParams(max_tokens=4 + i, seed=i))
            out[i] = policy.generate([req])[0]

        threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(out) == list(range(6)) and all(len(out[i].response_ids) <= 4 + i for i in out)
    finally:
        models.close()
