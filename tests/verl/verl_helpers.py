"""Builders for the verl-backend tests: token-carrying rollout trees, samples and a tiny random Llama.

A plain module (not conftest) so test files can import it by a name no other test folder uses.
"""

from __future__ import annotations

import random

import torch

from metaagent.records import (
    AgentTurn,
    CheckReport,
    Design,
    DesignerSample,
    Execution,
    RewardRecord,
    RolloutTree,
)

VOCAB = 61
PAD = 0
NO_TURNS = "no-turns"  # an execution whose script made no agent call


def tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        attn_implementation="eager",
        pad_token_id=PAD,
    )
    return LlamaForCausalLM(cfg).float()


def _ids(rng: random.Random, lo: int, hi: int) -> list[int]:
    return [rng.randrange(1, VOCAB) for _ in range(rng.randint(lo, hi))]


def _turn(k: int, role: str, rng: random.Random) -> AgentTurn:
    response = _ids(rng, 1, 7)
    return AgentTurn(
        k,
        role,
        "sys",
        [{"role": "user", "content": "q"}],
        "r",
        "r",
        _ids(rng, 2, 11),
        response,
        [rng.uniform(-3.0, -0.05) for _ in response],
        "stop",
        "m",
    )


def make_tree(rows, *, seed: int = 0, task_id: str = "t", turns: int = 2) -> RolloutTree:
    """rows[i]: rewards of design i's executions ([] = invalid design); an entry None = reward not computable,
    NO_TURNS = reward 1.0 but no agent call; a row None = valid design that was never executed."""
    rng = random.Random(seed)
    designs = []
    for i, row in enumerate(rows):
        response = _ids(rng, 2, 9)
        sample = DesignerSample(
            [{"role": "user", "content": "design"}],
            "script",
            _ids(rng, 3, 12),
            response,
            [rng.uniform(-2.5, -0.1) for _ in response],
            "stop",
            "m",
        )
        if row == []:
            designs.append(Design(i, "designer", sample, None, CheckReport(False), reward=0.0))
            continue
        execs = []
        for j, x in enumerate(row or []):
            if x is NO_TURNS:
                execs.append(Execution(j, "ok", turns=[], reward=RewardRecord(1.0, 1.0, 0.0)))
                continue
            reward = (
                RewardRecord(x, x, 0.0)
                if x is not None
                else RewardRecord(None, None, None, error="scorer failed")
            )
            execs.append(
                Execution(
                    j,
                    "ok",
                    turns=[_turn(k, ("Solver", "Verifier")[k % 2], rng) for k in range(turns)],
                    reward=reward,
                )
            )
        designs.append(Design(i, "designer", sample, "print(1)", CheckReport(True), executions=execs))
    return RolloutTree("run", {"id": task_id, "domain": "math"}, seed, {}, {"designer": "m"}, designs=designs)


def mixed_trees() -> list:
    """Three questions with every case credit must handle."""
    return [
        make_tree([[1.0, 0.4, None], [], [0.0, NO_TURNS], [None, None]], seed=1, task_id="q1"),
        make_tree([[0.0, 0.0], [1.4, 1.4], None, []], seed=2, task_id="q2"),
        make_tree([[0.7, 0.2, 1.0], [0.1, 0.9, 0.3]], seed=3, task_id="q3", turns=3),
    ]


def samples_of(
    trees, roles=("designer", "executor"), temperatures=None, estimator="hierarchical", **credit_options
):
    """Credit through metaagent.credit, then build_samples of ``roles`` (the local backend's path)."""
    from metaagent.credit import assign_credit
    from metaagent.train.samples import build_samples

    credit = assign_credit(trees, estimator, **credit_options)
    return build_samples(
        trees,
        active_roles=roles,
        temperatures=temperatures or {"designer": 0.7, "executor": 1.0},
        turn_advantages=credit.turn_advantages,
    )
