"""The update's micro-batch budget and recomputation mode: ``auto`` resolves per CPU kind and update dtype
from the one measured table (metaagent.learn.optim.UPDATE_DEFAULTS) when the config loads; explicit values
win."""

from __future__ import annotations

from metaagent.learn.optim import (
    FALLBACK_UPDATE,
    UPDATE_DEFAULTS,
    OptimizerConfig,
    resolve_update,
    update_defaults,
)
from metaagent.learn.recompute import RECOMPUTE
from metaagent.train.config import OptimConfig, TrainConfig


def _flags(monkeypatch, *flags: str) -> None:
    from metaagent.policy import precision

    monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset(flags))


def _resolved(cfg) -> tuple:
    return cfg.optim.micro_batch_tokens, cfg.optim.recompute


def test_the_table_holds_valid_settings():
    for (kind, dtype), chosen in UPDATE_DEFAULTS.items():
        assert dtype in ("float32", "bfloat16") and kind in ("AMX", "avx512_bf16", "AVX2")
        assert set(chosen) == {"micro_batch_tokens", "recompute"}
        assert isinstance(chosen["micro_batch_tokens"], int) and chosen["micro_batch_tokens"] > 0
        assert chosen["recompute"] in RECOMPUTE
    for chosen in FALLBACK_UPDATE.values():
        assert chosen["recompute"] in RECOMPUTE


def test_auto_resolves_for_the_cpu_kind_and_update_dtype_when_the_config_loads(monkeypatch):
    config = "default"  # configs/default.yaml sets both to auto
    _flags(monkeypatch, "avx512_bf16", "avx2")
    want = UPDATE_DEFAULTS[("avx512_bf16", "bfloat16")]
    assert _resolved(TrainConfig.load(config, [])) == (want["micro_batch_tokens"], want["recompute"])
    # an fp32 update on the same kind: its own row, or the CPU fallback where none was measured
    fp32 = UPDATE_DEFAULTS.get(("avx512_bf16", "float32"), FALLBACK_UPDATE["cpu"])
    got = _resolved(TrainConfig.load(config, ["optim.autocast=null"]))
    assert got == (fp32["micro_batch_tokens"], fp32["recompute"])


def test_an_unmeasured_kind_gets_the_cpu_fallback_and_explicit_values_win(monkeypatch):
    _flags(monkeypatch, "avx2")
    fallback = UPDATE_DEFAULTS.get(("AVX2", "float32"), FALLBACK_UPDATE["cpu"])
    want = (fallback["micro_batch_tokens"], fallback["recompute"])
    assert _resolved(TrainConfig.load("default", [])) == want
    _flags(monkeypatch)
    assert _resolved(TrainConfig.load("default", [])) == (768, "selective")  # "other": make demo's settings
    assert _resolved(TrainConfig.load(None, [])) == (4096, "selective")  # OptimizerConfig's own defaults
    cfg = TrainConfig.load("default", ["optim.micro_batch_tokens=2048", "optim.recompute=full"])
    assert _resolved(cfg) == (2048, "full")
    assert update_defaults("cuda:0", "bfloat16") == FALLBACK_UPDATE["other"]


def test_an_optimizer_config_on_its_own_resolves_for_the_cpu(monkeypatch):
    _flags(monkeypatch, "avx2")
    opt = OptimConfig(micro_batch_tokens="auto", recompute="auto").optimizer()  # no TrainConfig: for the CPU
    assert (opt.micro_batch_tokens, opt.recompute) == (768, "selective")
    explicit = OptimizerConfig(micro_batch_tokens=1000, recompute="off")
    assert resolve_update(explicit, "cpu") is explicit
    mixed = resolve_update(OptimizerConfig(micro_batch_tokens="auto", recompute="off"), "cpu")
    assert (mixed.micro_batch_tokens, mixed.recompute) == (768, "off")


def test_the_updater_resolves_auto_for_its_model_device(monkeypatch):
    import torch

    from metaagent.train.local.update import PolicyUpdater

    _flags(monkeypatch, "avx2")
    model = torch.nn.Linear(2, 2)
    updater = PolicyUpdater(model, micro_batch_tokens="auto", recompute="off")
    assert updater.optim.micro_batch_tokens == 768
