"""Mixture sampler: per-domain shares, seeded order, deterministic epoch reshuffles, exact resume."""

from __future__ import annotations

from collections import Counter

import pytest
from builders import load_plugin_domain

import metaagent.domain as registry
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
    math_only = MixtureSampler(tasks("math", 4), batch_size=4, ratio={"math": 1.0, "code": 0.0})
    assert {t.domain for t in math_only.next_batch()} == {"math"}  # a share 0 of a domain not loaded is fine


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
        ({"ratio": {"math": -1, "code": 2}}, r"weights must be >= 0; \['math'\]"),
        ({"ratio": {"math": 0.5, "code": 0.5, "proofs": 0.5}}, r"asks for domain\(s\) \['proofs'\] but no"),
        ({"ratio": {"math": 1.0, "code": 0.0}}, r"\['code'\] share 0.*7 code.*mix=\{code: 1, math: 1\}"),
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


# ---- data.mix over any domains (math + arith + qa) --------------------------------------------------------


@pytest.fixture
def arith(monkeypatch):
    """The one-file example domain ``arith`` (tests/domains/arith_domain.py) loaded as a plugin, then gone."""
    unload = load_plugin_domain(monkeypatch)
    yield registry.get_domain("arith")
    unload()


def three_domains(n: int = 4) -> list[Task]:
    return [
        *tasks("math", n),
        *(Task(id=f"a{i}", domain="arith", question=f"What is {i}+1?", answer=f"{i + 1}") for i in range(n)),
        *(Task(id=f"q{i}", domain="qa", question=f"Who wrote {i}?", answer=f"author {i}") for i in range(n)),
    ]


def test_every_loaded_domain_gets_an_equal_share_by_default(arith):
    """The issue's case: 4 math and 4 arith tasks (and 4 qa) were drawn as math only under math_fraction; now
    5 batches of 6 draw 10 of each, and data/drawn/<domain> counts them per batch."""
    sampler = MixtureSampler(three_domains(), batch_size=6, seed=0)
    assert sampler.slots == {"arith": 2, "math": 2, "qa": 2}
    drawn = Counter()
    for _ in range(5):
        before = dict(sampler.drawn)
        batch = sampler.next_batch()
        assert sampler.drawn_metrics(before) == {f"data/drawn/{d}": 2.0 for d in ("arith", "math", "qa")}
        drawn.update(t.domain for t in batch)
    assert drawn == {"math": 10, "arith": 10, "qa": 10}
    assert sampler.drawn_metrics() == {f"data/drawn/{d}": 10.0 for d in ("arith", "math", "qa")}


def test_mix_weights_and_a_loaded_domain_with_share_zero_is_refused_by_name(arith):
    from metaagent.data import DataError
    from metaagent.data.mixture import batch_shares

    counts = Counter(t.domain for t in three_domains())
    assert batch_shares({}, counts) == {"arith": 1.0, "math": 1.0, "qa": 1.0}
    assert MixtureSampler(three_domains(), batch_size=8, ratio={"math": 2, "arith": 1, "qa": 1}).slots == {
        "arith": 2, "math": 4, "qa": 2,
    }  # fmt: skip
    for mix in ({"math": 1, "arith": 1}, {"math": 1, "arith": 1, "qa": 0}):
        with pytest.raises(DataError, match=r"domain\(s\) \['qa'\] share 0, but data.train loaded 4 qa task"):
            batch_shares(mix, counts)
    with pytest.raises(DataError, match=r"\['qa'\]"):
        MixtureSampler(three_domains(), batch_size=6, ratio={"math": 1, "arith": 1})


# ---- the old math_fraction's batches are unchanged where data.mix equals it -------------------------------

#: sha256 (first 16 hex) of the ids of the first 12 batches of the packaged config's sampler, from the code
#: before data.mix (``batch_ratio(math_fraction=0.5, ...)``): half math, half code, seed 0
OLD_BATCHES = {"tiny": "e8f70d7e344389b6", "default": "a8bfd65dce4e6906"}


@pytest.mark.parametrize("name", sorted(OLD_BATCHES))
@pytest.mark.parametrize("override", [[], ["data.mix={}"], ["data.mix={}", "data.math_fraction=0.5"]])
def test_the_packaged_configs_draw_the_batches_math_fraction_drew(name, override):
    """As shipped (default.yaml: mix {math: 1, code: 1}; tiny: none), with the equal default, and with the
    deprecated alias: the same 12 batches as before, so exact-resume and learning tests see the same data."""
    import hashlib
    import json

    from metaagent.train.config import TrainConfig
    from metaagent.train.loop import batch_mix, load_tasks

    cfg = TrainConfig.load(name, override)
    train = load_tasks(cfg.data.train)
    sampler = MixtureSampler(train, batch_size=cfg.data.batch_size, ratio=batch_mix(cfg, train), seed=0)
    batches = [ids(sampler.next_batch()) for _ in range(12)]
    assert hashlib.sha256(json.dumps(batches).encode()).hexdigest()[:16] == OLD_BATCHES[name]


def test_math_fraction_is_a_deprecated_alias_of_mix():
    from metaagent.config import ConfigError
    from metaagent.train.config import TrainConfig
    from metaagent.train.loop import TrainError, batch_mix, load_tasks

    cfg = TrainConfig.load("tiny", ["data.mix={}", "data.math_fraction=0.25"])
    train = load_tasks(cfg.data.train)
    assert batch_mix(cfg, train) == {"math": 0.25, "code": 0.75}
    with pytest.raises(TrainError, match=r"\['code'\] share 0"):  # it silently dropped code; now refused
        batch_mix(TrainConfig.load("tiny", ["data.mix={}", "data.math_fraction=1.0"]), train)
    half = TrainConfig.load("tiny", ["data.math_fraction=0.5"])
    assert batch_mix(half, train) == {"math": 0.5, "code": 0.5}
    with pytest.raises(ConfigError, match="deprecated alias of data.mix; give only data.mix"):
        TrainConfig.load("default", ["data.math_fraction=0.5"])  # default.yaml sets data.mix
