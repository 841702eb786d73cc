"""``policy.weights: separate`` on verl's real FSDP engine on CPU: two physical models, two worker groups.

``train-metaagent --backend verl`` with ``verl.device=cpu`` (tests/verl/test_verl_cpu.py runs one model this
way) trains two tiny random models of one architecture, drawn from different seeds: the designer (split placement:
its Hugging Face rollout pulls the weights from the FSDP engine) and the executor (colocated: verl's own weight
sync). The reply texts are scripted by request seed (tests/verl/forced_train.py: valid and refused designs, tagged
and untagged answers), with each model's own tokens and log-probs, so each stage's model really updates.
Stagewise with K=1: step 0 trains the executor, step 1 the designer, step 2 the executor.

Which model served a call does not depend on what was sampled: its record names the model, and its log-probs are
those of that model's weights at that step (to 1e-5, as the one-model test checks) and not the other's.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
import torch
from test_verl_cpu import LOGPROB_TOL, fsdp_model, mean_logprobs, rows, train

pytestmark = pytest.mark.slow

KEYS = ("designer", "executor")
SEEDS = {"designer": 1, "executor": 2}
STEPS = 3
#: a weight an update moved: lr 1e-3 Adam moves every weight it touches by about that much
MOVED = 1e-4


def separate(models: dict[str, str]) -> tuple[str, ...]:
    return (
        "policy.weights=separate", f"policy.designer_model={models['designer']}",
        f"policy.executor_model={models['executor']}", "rollout.frozen_designer=null", "schedule.mode=stagewise",
        "schedule.stage_len=1", "rollout.m_designs=4", "rollout.n_executions=2", "rollout.designer.max_tokens=64",
        "verl.models={designer: {gpus: 1, rollout_gpus: 1}, executor: {gpus: 1}}", "verl.n_gpus_per_node=3",
        f"trainer.steps={STEPS}",
    )  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """Two tiny random models (the ``tiny`` alias's architecture and tokenizer), one per seed."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from metaagent.policy.models import resolve_model

    base, root = resolve_model("tiny"), tmp_path_factory.mktemp("models")
    out = {}
    for key in KEYS:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEEDS[key])
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(base)).float()
        model.save_pretrained(root / key)
        AutoTokenizer.from_pretrained(base).save_pretrained(root / key)
        out[key] = str(root / key)
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory, models) -> Path:
    out = tmp_path_factory.mktemp("verl_separate") / "run"
    train(out, models["designer"], *separate(models))
    return out


@pytest.fixture(scope="module")
def resumed(tmp_path_factory, run, models) -> Path:
    """The run resumed from its step-2 checkpoint (the last step done again in a fresh process)."""
    copy = tmp_path_factory.mktemp("verl_separate_resumed") / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns(f"step_{STEPS:08d}", f"step_{STEPS - 1:06d}.jsonl"))
    lines = (copy / "metrics.jsonl").read_text().splitlines()
    (copy / "metrics.jsonl").write_text("\n".join(lines[: STEPS - 1]) + "\n")
    train(copy, models["designer"], *separate(models), "--resume")
    return copy


def state(folder: str):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


@functools.cache
def _weights(run: Path, step: int, models: tuple[tuple[str, str], ...]) -> dict[str, object]:
    paths = dict(models)
    if step == 0:
        return {key: state(paths[key]) for key in KEYS}
    ckpt = run / "checkpoints" / f"step_{step:08d}"
    return {key: fsdp_model(ckpt, paths[key], key) for key in KEYS}


def weights_at(run: Path, models: dict[str, str], step: int) -> dict[str, object]:
    """Each model's weights at the start of ``step``: the starting models, then the step's checkpoint (read once;
    the tests only read them)."""
    return _weights(run, step, tuple(sorted(models.items())))


def calls(run: Path, step: int) -> dict[str, list[dict]]:
    """The designer samples and the agent turns of a step's rollout records."""
    out: dict[str, list[dict]] = {key: [] for key in KEYS}
    for line in (run / "rollouts" / f"step_{step:06d}.jsonl").read_text().splitlines():
        for d in json.loads(line)["designs"]:
            out["designer"].append(d["sample"])
            out["executor"] += [t for e in d["executions"] for t in e["turns"] if t["response_ids"]]
    return out


def worst(model, served: list[dict]) -> float:
    """max |log-prob under ``model`` - the recorded rollout log-prob| over the tokens of ``served``."""
    got = mean_logprobs(model, served)
    return max(float((a - torch.tensor(t["logprobs"])).abs().max()) for a, t in zip(got, served))


def same(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return all(torch.allclose(sa[k], sb[k], atol=1e-6) for k in sa)


def moved(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return any((sa[k] - sb[k]).abs().max() > MOVED for k in sa)


def test_designer_calls_are_served_by_the_designer_model_and_agent_calls_by_the_executor(run, models):
    for step in range(STEPS):
        weights, served = weights_at(run, models, step), calls(run, step)
        for key, other in (KEYS, KEYS[::-1]):
            assert served[key], (step, key)  # both kinds of call happen in every stage
            assert {c["model"] for c in served[key]} == {models[key]}, (step, key)
            # the rollout's log-probs are this model's weights at this step, and not the other model's
            assert worst(weights[key], served[key]) <= LOGPROB_TOL, (step, key)
            assert worst(weights[other], served[key]) > 1e-3, (step, key)


def test_a_stage_updates_its_own_model_only(run, models):
    steps = rows(run)
    assert [r["schedule/active"] for r in steps] == ["executor", "designer", "executor"]
    for r in steps:
        active, idle = r["schedule/active"], "designer" if r["schedule/active"] == "executor" else "executor"
        assert r[f"verl/{active}/skipped_step"] == 0.0 and r[f"verl/{active}/actor/grad_norm"] > 0, r
        assert r[f"verl/{idle}/skipped_step"] == 1.0 and r[f"verl/{idle}/samples"] == 0.0, r
        assert r[f"verl/{active}/rollout_logprob_diff_max"] <= LOGPROB_TOL, r  # the actor is the rollout
    for step, r in enumerate(steps):
        before, after = weights_at(run, models, step), weights_at(run, models, step + 1)
        active = r["schedule/active"]
        for key in KEYS:
            if key == active:
                assert moved(before[key], after[key]), (step, key)
            else:
                assert same(before[key], after[key]), (step, key)  # the other model's weights did not move


def test_each_models_checkpoint_restores_into_that_model_only(run, resumed, models):
    """The resumed run starts step 2 from the step-2 checkpoint (both models moved from their starting weights
    by then): each model serves its calls with its own restored weights, the designer comes out of the step
    unchanged, and both end equal to the uninterrupted run's."""
    restored = weights_at(run, models, STEPS - 1)
    start = weights_at(run, models, 0)
    for key in KEYS:
        assert moved(start[key], restored[key]), key  # a restore of the starting model would show
    served = calls(resumed, STEPS - 1)
    for key, other in (KEYS, KEYS[::-1]):
        assert worst(restored[key], served[key]) <= LOGPROB_TOL, key
        assert worst(restored[other], served[key]) > 1e-3, key
    again = calls(run, STEPS - 1)
    for key in KEYS:  # the same calls, answered with the same log-probs
        assert [(c["prompt_ids"], c["response_ids"]) for c in served[key]] == [
            (c["prompt_ids"], c["response_ids"]) for c in again[key]
        ], key
        for a, b in zip(served[key], again[key]):
            assert torch.allclose(torch.tensor(a["logprobs"]), torch.tensor(b["logprobs"]), atol=1e-6), key

    first, second = rows(run)[STEPS - 1], rows(resumed)[STEPS - 1]
    assert second["step"] == STEPS - 1
    for k in ("train/executor/loss", "verl/executor/actor/pg_loss", "verl/executor/actor/grad_norm"):
        assert second[k] == pytest.approx(first[k], abs=1e-6), k
    end_run, end_resumed = weights_at(run, models, STEPS), weights_at(resumed, models, STEPS)
    for key in KEYS:
        assert same(end_run[key], end_resumed[key]), key
    assert same(restored["designer"], end_resumed["designer"])  # restored, and not moved by the executor stage
