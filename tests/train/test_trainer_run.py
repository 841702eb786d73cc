"""The local trainer end to end on the tiny model with scripted replies (tests/builders.py::forced_generate: the
reply texts are fixed functions of the request seeds; tokens, log-probs and updates are the model's own):

- 4 steps with K = 2 pass through an executor stage and a designer stage, each updating only its own model
  (every step updates: the scripted rewards vary in every step, on any machine), and write metrics, rollouts
  and checkpoints; the executor's step-0 update moves probability towards its positive-advantage replies;
- resuming from the step-2 checkpoint reproduces steps 3-4 exactly (metrics, rollouts and weights);
- a SIGINT at a random point (a step, and where in it: its rollout, its update, or twice in its rollout to
  abandon it) stops a third run with a checkpoint, and ``resume=True`` then reproduces the uninterrupted run
  exactly (the point is drawn afresh each run and named in every assertion message).

Whether a real model learns (the executor the delivery format, the designer valid scripts) is a sampled
outcome: it is measured by ``benchmarks/tiny_learning.py`` (committed numbers), not asserted here.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
from pathlib import Path

import pytest
import torch
from builders import forced_generate, seed_of
from warm_tiny import SCRIPT, TAGGED, TRAIN_SPEC, UNTAGGED

from metaagent.learn.metrics import read_metrics
from metaagent.policy.hf import HFPolicy
from metaagent.train.config import TrainConfig
from metaagent.train.loop import TrainInterrupted, TrainLoop

pytestmark = pytest.mark.slow


def scripted(request) -> str:
    """The designer writes the one-agent ``SCRIPT``; an agent delivers (``TAGGED``, R = 0.4) on even request seeds
    and answers untagged (R = 0) on odd ones, so every step's groups hold both rewards."""
    if request.role == "designer":
        return f"```python\n{SCRIPT}```"
    return TAGGED if seed_of(request) % 2 == 0 else UNTAGGED


@pytest.fixture(autouse=True)
def forced(monkeypatch):
    monkeypatch.setattr(HFPolicy, "_generate", forced_generate(scripted))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _config(out: Path, *extra: str) -> TrainConfig:
    return TrainConfig.load(
        None,
        [
            "policy.weights=separate",
            "policy.designer_model=tiny",
            "policy.executor_model=tiny",
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


def _params(trainer: TrainLoop) -> dict[str, torch.Tensor]:
    models = trainer.backend.models.models
    return {f"{k}.{n}": p.detach().clone() for k, m in models.items() for n, p in m.named_parameters()}


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
def test_four_steps_two_stages_then_exact_resume(tmp_path, lora):
    out = tmp_path / "run"
    extra = (*RESUME, *(LORA if lora else ()))
    cfg = _config(out, *extra)
    with TrainLoop(cfg) as trainer:
        if lora:
            assert all(u.ref_model is None and u.has_reference for u in trainer.backend.updaters.values())
        trainer.save(0)  # where the interrupted run below starts (fresh LoRA adapters are not seeded alike)
        before = _params(trainer)
        after: dict[int, dict[str, torch.Tensor]] = {}
        trainer.train(on_step=lambda r: after.__setitem__(r.step, _params(trainer)))
        executor = trainer.backend.models.policies["executor"].backend
    rows = [r for r in read_metrics(out / "metrics.jsonl")[0] if r["step"] >= 0]
    assert [r["schedule/active"] for r in rows] == ["executor", "executor", "designer", "designer"]
    for r in rows:  # every step updates its stage's model: its groups held both rewards
        active = r["schedule/active"]
        assert r[f"train/{active}/skipped_step"] == 0.0 and r[f"train/{active}/grad_norm"] > 0, r

    # executor stage: only the executor model moves; designer stage: only the designer model (LoRA: both keys
    # are adapters on one shared tiny base, so a role's weights are its adapter's)
    def moved(a, b, role):
        mine = [k for k in a if k.startswith(role) and (not lora or f".{role}." in k)]
        return any(not torch.equal(a[k], b[k]) for k in mine)

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
    assert all(r["rollout/valid_script_rate"] == 1.0 for r in rows)
    assert sorted(p.name for p in (out / "rollouts").iterdir()) == [f"step_{s:06d}.jsonl" for s in range(4)]
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.is_dir())[-2:] == ["step_00000002", "step_00000004"]
    if not lora:  # step 0's update raised the log-probs of its positive-advantage replies against the rest
        _check_update_direction(out, executor, after[0])

    # resume from the step-2 checkpoint in a copy of the run directory: steps 3-4 again, bit for bit
    copy = tmp_path / "resumed"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("step_00000004"))
    cfg = _config(copy, *extra)
    with TrainLoop(cfg, resume=str(copy / "checkpoints" / "step_00000002")) as trainer:
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
        assert [_replies(t) for t in first] == [_replies(t) for t in second]
    _check_interrupted_run(tmp_path, extra, out, rows, after[3])


def _replies(tree: dict) -> list:
    executions = [d["executions"] for d in tree["designs"]]
    return [[(e["answer"], [turn["response"] for turn in e["turns"]]) for e in ex] for ex in executions]


def _check_interrupted_run(
    tmp_path: Path, extra: tuple[str, ...], out: Path, rows: list[dict], final: dict
) -> None:
    """A third run, from the first run's step-0 checkpoint, gets SIGINT at a random point and stops with a
    checkpoint; resumed, it ends with the uninterrupted run's weights, metrics and rollouts."""
    # a fresh point each run (any point must resume exactly); METAAGENT_TEST_INTERRUPT_SEED replays one
    seed = int(os.environ.get("METAAGENT_TEST_INTERRUPT_SEED") or int.from_bytes(os.urandom(4), "little"))
    pick = random.Random(seed)
    at, where = pick.randrange(3), pick.choice(["rollout", "update", "abandon"])
    why = f"SIGINT at step {at}, {where} (seed {seed})"
    cut = tmp_path / "cut"
    shutil.copytree(out / "checkpoints" / "step_00000000", cut / "checkpoints" / "step_00000000")
    for name in ("run.json", "config.yaml"):
        shutil.copy(out / name, cut / name)
    cfg = _config(cut, *extra)
    with TrainLoop(cfg, resume=True) as trainer:
        _signal_at(trainer, at, where)
        with pytest.raises(TrainInterrupted) as e:
            trainer.train()
    done = at if where == "abandon" else at + 1  # an abandoned step is checkpointed as it started
    assert (e.value.next_step, e.value.exit_code) == (done, 130), why
    assert str(e.value) == f"interrupted after step {done}; continue with --resume"
    assert e.value.checkpoint == cut / "checkpoints" / f"step_{done:08d}", why
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the loop's handler is gone
    cfg = _config(cut, *extra)
    with TrainLoop(cfg, resume=True) as trainer:
        assert trainer.start_step == done, why
        trainer.train()
        resumed = _params(trainer)
    assert all(torch.equal(resumed[k], final[k]) for k in resumed), why
    again = [_strip(r) for r in read_metrics(cut / "metrics.jsonl")[0] if r["step"] >= 0]
    assert again == [_strip(r) for r in rows], why
    for s in range(4):
        files = [d / "rollouts" / f"step_{s:06d}.jsonl" for d in (out, cut)]
        first, second = ([json.loads(x) for x in f.read_text().splitlines()] for f in files)
        assert [_replies(t) for t in first] == [_replies(t) for t in second], (why, s)


def _signal_at(trainer: TrainLoop, at: int, where: str) -> None:
    """SIGINT to this process in step ``at``: once its designs are written (``rollout``); once at the start
    of its update and again inside it (``update``: the second is refused, the step finishes); or at the start
    of its rollout and again once its designs are written (``abandon``)."""
    engine, backend = trainer.engine, trainer.backend
    rollout, update, designs_done = engine.rollout, backend.update, engine.observer.designs_done
    current = [-1]

    def rollout_(tasks, *, step, **kw):
        current[0] = step
        if step == at and where == "abandon":
            signal.raise_signal(signal.SIGINT)
        return rollout(tasks, step=step, **kw)

    def designs_done_(designs):
        designs_done(designs)
        if current[0] == at and where in ("rollout", "abandon"):
            current[0] = -1  # once: dynamic sampling may roll out again
            signal.raise_signal(signal.SIGINT)

    def update_(samples, step, *args):
        if step == at and where == "update":
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
        return update(samples, step, *args)

    engine.rollout, backend.update, engine.observer.designs_done = rollout_, update_, designs_done_


def _check_update_direction(out: Path, policy: HFPolicy, weights: dict[str, torch.Tensor]) -> None:
    """One gradient step on L = -mean A * ratio (+ a small entropy bonus) raises sum_i A_i * (mean log-prob
    change of turn i) to first order (the same check as tests/verl/test_verl_cpu.py)."""
    from metaagent.learn.logprobs import response_logprobs
    from metaagent.learn.samples import Sample, collate
    from metaagent.records import read_trees

    trees, bad = read_trees(out / "rollouts" / "step_000000.jsonl")
    assert not bad
    turns = [(t, e.advantage) for tree in trees for _, e in tree.executions() for t in e.turns]
    assert {a > 0 for _, a in turns} == {True, False}
    model = policy.model
    state = {k.split(".", 1)[1]: v for k, v in weights.items() if k.startswith("executor.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)  # tied to the embeddings
    with torch.no_grad():
        changes = []
        for t, _ in turns:
            s = Sample("executor", t.prompt_ids, t.response_ids, t.logprobs, 0.0, 1.0)
            lp = response_logprobs(model, collate([s]))[0][0, : len(t.response_ids)]
            changes.append(float((lp - torch.tensor(t.logprobs)).mean()))
    adv = torch.tensor([a for _, a in turns])
    assert float((adv * torch.tensor(changes)).sum()) > 0, (adv, changes)


def test_a_fresh_run_moves_an_earlier_run_aside(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"run_id": "old-1"}))
    (out / "metrics.jsonl").write_text('{"step": 0}\n')
    cfg = TrainConfig.load(str(Path(__file__).parents[2] / "configs" / "tiny.yaml"), [f"trainer.out={out}"])
    with TrainLoop(cfg):
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
    from metaagent.train.local.models import load_models

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


def test_frozen_mode_draws_the_same_tasks_and_seeds_and_changes_no_weight(tmp_path):
    """schedule.mode=frozen, the paired baseline of an experiment: the rollouts of a trained run's steps (same
    tasks, same seeds), no update and no optimizer state touched, checkpoints of the unchanged weights."""

    def run(out: Path, mode: str) -> tuple[dict, dict, list[dict]]:
        cfg = _config(out, *RESUME, f"schedule.mode={mode}", "trainer.steps=2")
        with TrainLoop(cfg) as trainer:
            before = _params(trainer)
            trainer.train()
            after = _params(trainer)
        return before, after, [r for r in read_metrics(out / "metrics.jsonl")[0] if r["step"] >= 0]

    before, after, rows = run(tmp_path / "frozen", "frozen")
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert [r["schedule/active"] for r in rows] == ["none", "none"]
    for r in rows:  # no role's samples were built, and each model skipped its update
        assert r["samples/designer"] == 0 and r["samples/executor"] == 0 and r["samples/inactive/designer"] > 0
        assert r["train/designer/skipped_step"] == 1.0 and r["train/executor/skipped_step"] == 1.0
    _, trained, _ = run(tmp_path / "trained", "coupled")
    assert any(not torch.equal(before[k], trained[k]) for k in before)  # the same settings do train in another mode

    def drawn(out: Path, step: int) -> list:
        trees = [json.loads(x) for x in (out / "rollouts" / f"step_{step:06d}.jsonl").read_text().splitlines()]
        return [(t["task"]["id"], t["seed"], [[e["seed"] for e in d["executions"]] for d in t["designs"]]) for t in trees]

    for step in (0, 1):
        assert drawn(tmp_path / "frozen", step) == drawn(tmp_path / "trained", step)
