"""Mixture sampler: per-domain shares, seeded order, deterministic epoch reshuffles, exact resume."""

from __future__ import annotations

from collections import Counter

import pytest

from metaagent.data import MixtureSampler, Task


def tasks(domain: str, n: int) -> list[Task]:
    if domain == "math":
        return [Task(id=f"m{i}", domain="math", question=f"q{i}", answer=str(i)) for i in range(n)]
    return [Task(id=f"c{i}", domain="code", question=f"q{i}", tests={"assert": "pass"}) for i in range(n)]


POOL = tasks("math", 10) + tasks("code", 7)


def ids(batch):
    return [t.id for t in batch]


def test_half_math_half_code():
    sampler = MixtureSampler(POOL, batch_size=8, seed=1)
    for _ in range(5):
        assert Counter(t.domain for t in sampler.next_batch()) == {"math": 4, "code": 4}


def test_ratio_is_configurable():
    sampler = MixtureSampler(POOL, batch_size=8, ratio={"math": 3, "code": 1})
    assert sampler.slots == {"math": 6, "code": 2}
    assert MixtureSampler(POOL, batch_size=5, ratio={"math": 0.5, "code": 0.5}).slots == {
        "code": 3,
        "math": 2,
    }
    math_only = MixtureSampler(POOL, batch_size=4, ratio={"math": 1.0, "code": 0.0})
    assert {t.domain for t in math_only.next_batch()} == {"math"}


def test_same_seed_same_order_different_seed_different_order():
    a = [ids(MixtureSampler(POOL, seed=3).next_batch()) for _ in range(1)]
    b = [ids(MixtureSampler(POOL, seed=3).next_batch()) for _ in range(1)]
    c = [ids(MixtureSampler(POOL, seed=4).next_batch()) for _ in range(1)]
    assert a == b and a != c


def test_each_epoch_visits_every_task_once_and_reshuffles():
    sampler = MixtureSampler({"math": tasks("math", 8)}, batch_size=4, ratio={"math": 1})
    epoch0 = ids(sampler.next_batch()) + ids(sampler.next_batch())
    epoch1 = ids(sampler.next_batch()) + ids(sampler.next_batch())
    assert sorted(epoch0) == sorted(epoch1) == sorted(f"m{i}" for i in range(8))
    assert epoch0 != epoch1
    assert sampler.epochs == {"math": 2}
    again = MixtureSampler({"math": tasks("math", 8)}, batch_size=4, ratio={"math": 1})
    assert [ids(again.next_batch()) for _ in range(4)] == [epoch0[:4], epoch0[4:], epoch1[:4], epoch1[4:]]


def test_resume_continues_the_exact_order():
    reference = MixtureSampler(POOL, batch_size=6, seed=9)
    expected = [ids(reference.next_batch()) for _ in range(12)]
    first = MixtureSampler(POOL, batch_size=6, seed=9)
    got = [ids(first.next_batch()) for _ in range(5)]
    state = first.state_dict()
    resumed = MixtureSampler(POOL, batch_size=6, seed=9)
    resumed.load_state_dict(state)
    got += [ids(resumed.next_batch()) for _ in range(7)]
    assert got == expected
    assert resumed.batches == 12


def test_state_is_plain_json():
    import json

    sampler = MixtureSampler(POOL)
    sampler.next_batch()
    state = json.loads(json.dumps(sampler.state_dict()))
    other = MixtureSampler(POOL)
    other.load_state_dict(state)
    assert ids(other.next_batch()) == ids(sampler.next_batch())


def test_resume_refuses_a_different_setup():
    state = MixtureSampler(POOL, seed=1).state_dict()
    with pytest.raises(ValueError, match="seed"):
        MixtureSampler(POOL, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="fingerprint"):
        MixtureSampler(POOL[:-1], seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="version"):
        MixtureSampler(POOL, seed=1).load_state_dict({**state, "version": 99})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"ratio": {"math": -1, "code": 2}}, "ratio"),
        ({"ratio": {"math": 0.5, "proofs": 0.5}}, "no tasks of that domain"),
        ({"batch_size": 1}, "too small"),
    ],
)
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MixtureSampler(POOL, **kwargs)


def test_works_with_the_bundled_set():
    from metaagent.data import load_bundled

    sampler = MixtureSampler(load_bundled("train"), batch_size=8, seed=0)
    batch = sampler.next_batch()
    assert Counter(t.domain for t in batch) == {"math": 4, "code": 4}
