"""Per-turn credit through the records (records v2): a toy estimator registered from a test writes
``AgentTurn.advantage``, samples use it, candidates and synthetic turns are handled, and a tiny-model run
trains end to end with it."""

from __future__ import annotations

import json

import pytest
import torch

from metaagent.credit import TreeCredit, assign_credit, register_estimator
from metaagent.learn.samples import build_samples, collate
from metaagent.records import AgentTurn, TurnGroup

TEMPS = {"designer": 1.0, "executor": 1.0}


@register_estimator("toy_last_turn")
def toy_last_turn(trees, *, bonus: float = 1.0):
    """Every execution's last turn gets +bonus, every other turn -bonus; designs get no advantage."""
    out = []
    for tree in trees:
        c = TreeCredit()
        for i, d in enumerate(tree.designs):
            for j, e in enumerate(d.executions):
                for k in range(len(e.turns)):
                    c.turns[(i, j, k)] = bonus if k == len(e.turns) - 1 else -bonus
        out.append(c)
    return out


def test_a_registered_per_turn_estimator_writes_turn_advantages_and_samples_use_them(make_token_tree):
    tree = make_token_tree([[1.0, 0.0]], seed=3)  # two turns (Solver, Verifier) per execution
    result = assign_credit([tree], "toy_last_turn", bonus=0.5)
    turns = [t for e in tree.designs[0].executions for t in e.turns]
    assert [t.advantage for t in turns] == [-0.5, 0.5, -0.5, 0.5]
    assert result.metrics["credit/turn_advantages"] == 4
    samples = build_samples([tree], active_roles={"executor"}, temperatures=TEMPS)
    assert sorted(s.advantage for s in samples) == [-0.5, -0.5, 0.5, 0.5]
    assign_credit([tree])  # hierarchical: per-turn advantages are reset, turns train with their execution's
    assert all(t.advantage is None for t in turns)


def test_synthetic_turns_are_never_samples_and_candidates_are(make_token_tree):
    tree = make_token_tree([[1.0, 0.0]], seed=4)
    e0, e1 = tree.designs[0].executions
    e1.turns[0].synthetic = True
    first = e0.turns[0]
    other = AgentTurn.from_dict({**first.to_dict(), "response_ids": [7, 8, 9], "logprobs": [-1.0] * 3})
    e0.groups = [TurnGroup("0/Solver/0", first.role, 0, first.call_index, [first, other], 0, [1.0, 0.0])]

    @register_estimator("toy_candidates")
    def toy_candidates(trees):
        c = TreeCredit(executor={(0, 0): 0.3, (0, 1): -0.3}, candidates={(0, 0, 0, 0): 1.0, (0, 0, 0, 1): -1.0})
        return [c]

    assign_credit([tree], "toy_candidates")
    assert e0.groups[0].advantages == [1.0, -1.0]
    samples = build_samples([tree], active_roles={"executor"}, temperatures=TEMPS)
    # e0: its first call is a candidate group (2 samples), its second turn trains with e0's 0.3;
    # e1: its first turn is synthetic (no sample), its second trains with e1's -0.3
    assert sorted(s.key for s in samples) == [(0, 0, 0, 0, 0), (0, 0, 0, 0, 1), (0, 0, 0, 1), (0, 0, 1, 1)]
    assert sorted(s.advantage for s in samples) == [-1.0, -0.3, 0.3, 1.0]
    assert samples.metrics["samples/synthetic_turns"] == 1 and samples.metrics["samples/candidates"] == 2


def test_token_advantages_override_the_scalar_in_collate(make_token_tree):
    tree = make_token_tree([[1.0, 0.0]], seed=5)
    assign_credit([tree])
    s = build_samples([tree], active_roles={"executor"}, temperatures=TEMPS)[0]
    s.token_advantages = [float(i) for i in range(len(s.response_ids))]
    batch = collate([s])
    assert batch["advantages"][0, : len(s.response_ids)].tolist() == s.token_advantages
    s.token_advantages = [1.0]
    with pytest.raises(Exception, match="token advantages"):
        collate([s])


@pytest.mark.slow
def test_a_tiny_run_trains_end_to_end_with_a_per_turn_estimator(tmp_path):
    from warm_tiny import SCRIPT, TRAIN_SPEC

    from metaagent.train.config import TrainConfig
    from metaagent.train.loop import TrainLoop

    script = tmp_path / "solver.py"
    script.write_text(SCRIPT)
    cfg = TrainConfig.load(
        None,
        [
            "policy.model=tiny",
            f"data.train=[{json.dumps(TRAIN_SPEC)}]",
            "data.val=[]",
            "data.batch_size=2",
            "rollout.m_designs=1",
            "rollout.n_executions=2",
            "rollout.executor.max_tokens=8",
            f"rollout.frozen_designer={script}",
            "rollout.sandbox_workers=2",
            "schedule.mode=executor_only",
            "algo.estimator=toy_last_turn",
            "algo.options={bonus: 0.25}",
            "optim.lr=1e-3",
            "trainer.steps=2",
            "trainer.save_every=0",
            "trainer.tensorboard=false",
            f"trainer.out={tmp_path / 'run'}",
        ],
    )
    with TrainLoop(cfg) as trainer:
        before = {n: p.detach().clone() for n, p in trainer.backend.models.models[next(iter(trainer.backend.models.models))].named_parameters()}
        results = trainer.train()
        after = dict(trainer.backend.models.models[next(iter(trainer.backend.models.models))].named_parameters())
    assert all(r.metrics["credit/turn_advantages"] > 0 for r in results)
    assert results[-1].metrics["train/samples"] > 0 and results[-1].metrics["train/skipped_step"] == 0.0
    assert any(not torch.equal(before[n], after[n].detach()) for n in before)
    rows = (tmp_path / "run" / "rollouts" / "step_000001.jsonl").read_text().splitlines()
    turns = [t for d in json.loads(rows[0])["designs"] for e in d["executions"] for t in e["turns"]]
    assert turns and all(t["advantage"] == 0.25 for t in turns)  # one turn per execution: the last


def test_preference_pairs_in_the_records_become_dpo_pairs_routed_to_their_model(make_model, make_token_tree):
    from metaagent.learn.samples import build_pair_samples
    from metaagent.records import PreferencePair
    from metaagent.train.local.update import PolicyUpdater, update_routed

    tree = make_token_tree([[1.0, 0.0]], seed=6)
    e = tree.designs[0].executions[1]
    e.preferences = [PreferencePair(1, e.turns[1].messages, e.turns[1].prompt_ids, [5, 6], e.turns[1].response_ids, "resample")]
    assert build_pair_samples([tree], active_roles={"designer"}) == []  # executor pairs, designer stage
    (pair,) = build_pair_samples([tree], active_roles={"executor"})
    assert pair.key == (0, 0, 1, 0) and pair.agent == e.turns[1].role and pair.route_name == f"executor:{pair.agent}"
    assign_credit([tree])
    samples = build_samples([tree], active_roles={"executor"}, temperatures=TEMPS)
    updater = PolicyUpdater(make_model(), ref_model=make_model(), lr=1e-3)
    m = update_routed({"policy": updater}, samples, {"*": "policy"}, active_roles={"executor"}, pairs=[pair], dpo_beta=0.5)
    assert m["train/dpo_pairs"] == 1.0 and m["train/dpo_loss"] == pytest.approx(0.6931, abs=1e-3)
    assert m["train/skipped_step"] == 0.0
