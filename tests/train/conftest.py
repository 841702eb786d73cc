"""A tiny random Llama (small vocabulary) and builders of samples and token-carrying rollout trees."""

from __future__ import annotations

import random

import pytest
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
from metaagent.train.samples import Sample

VOCAB = 61


def tiny_llama(seed: int = 0, tie: bool = False):
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
        tie_word_embeddings=tie,
        attn_implementation="eager",
    )
    return LlamaForCausalLM(cfg).float()


@pytest.fixture
def model():
    return tiny_llama()


def random_samples(n: int, seed: int = 0, roles=("designer", "executor"), logprob=-2.0) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p, r = rng.randint(1, 9), rng.randint(1, 8)
        out.append(
            Sample(
                role=roles[i % len(roles)],
                prompt_ids=[rng.randrange(VOCAB) for _ in range(p)],
                response_ids=[rng.randrange(VOCAB) for _ in range(r)],
                old_logprobs=[logprob + rng.uniform(-0.5, 0.5) for _ in range(r)],
                advantage=rng.uniform(-1.5, 1.5),
                temperature=rng.choice([1.0, 0.7, 1.3]),
                agent="" if roles[i % len(roles)] == "designer" else "Solver",
                key=(i,),
            )
        )
    return out


@pytest.fixture
def make_samples():
    return random_samples


def _turn(k: int, role: str, rng: random.Random) -> AgentTurn:
    r = rng.randint(1, 6)
    return AgentTurn(
        k,
        role,
        "sys",
        [{"role": "user", "content": "q"}],
        "r",
        "r",
        [rng.randrange(VOCAB) for _ in range(rng.randint(2, 8))],
        [rng.randrange(VOCAB) for _ in range(r)],
        [-1.0] * r,
        "stop",
        "m",
    )


def token_tree(rows, seed: int = 0, task_id: str = "t") -> RolloutTree:
    """A tree whose designs and turns carry random token ids; rows[i] = rewards of design i ([] = invalid)."""
    rng = random.Random(seed)
    designs = []
    for i, row in enumerate(rows):
        r = rng.randint(2, 8)
        sample = DesignerSample(
            [{"role": "user", "content": "design"}],
            "script",
            [rng.randrange(VOCAB) for _ in range(rng.randint(3, 9))],
            [rng.randrange(VOCAB) for _ in range(r)],
            [-1.5] * r,
            "stop",
            "m",
        )
        if not row:
            designs.append(Design(i, "designer", sample, None, CheckReport(False)))
            continue
        execs = [
            Execution(
                j,
                "ok",
                turns=[_turn(0, "Solver", rng), _turn(1, "Verifier", rng)],
                reward=RewardRecord(x, x, 0.0),
            )
            for j, x in enumerate(row)
        ]
        designs.append(Design(i, "designer", sample, "print(1)", CheckReport(True), executions=execs))
    return RolloutTree("run", {"id": task_id, "domain": "math"}, seed, {}, {"designer": "m"}, designs=designs)


@pytest.fixture
def make_token_tree():
    return token_tree


@pytest.fixture
def make_model():
    return tiny_llama
