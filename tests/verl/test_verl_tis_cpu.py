"""``optim.tis_cap`` end to end on verl's real FSDP engine on CPU (``train-metaagent --backend verl``,
``verl.device=cpu``): one step with and one without the correction, from the same seed.

On CPU the rollout (the HF policy) and verl's actor compute the same log-probs (to 1e-5, issue #26), so every raw
ratio pi_old / pi_rollout is 1 up to fp32 noise. A cap of 0.5 therefore truncates every token's weight to exactly
0.5: with the ratio pi_theta / pi_old = 1 at the first mini-batch, the policy gradient verl's update computes is
then exactly half the uncorrected one, which shows the weights reached verl's loss. (A GPU run, where vLLM's bf16
log-probs differ from the trainer's, is what gives weights other than a constant; see docs/gpu.md, "Mismatch correction on the verl backend".)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_verl_cpu import rows, train

from metaagent.lazy import import_file

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

CAP = 0.5


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> str:
    warm_tiny = import_file(ROOT / "tests" / "train" / "warm_tiny.py", "warm_tiny").warm_tiny
    return warm_tiny(tmp_path_factory.mktemp("warm"), "executor")


def step0_responses(run: Path) -> list[list[int]]:
    out = []
    for line in (run / "rollouts" / "step_000000.jsonl").read_text().splitlines():
        for d in json.loads(line)["designs"]:
            for e in d["executions"]:
                out += [t["response_ids"] for t in e["turns"]]
    return out


def test_tis_weights_reach_verls_update_on_cpu(tmp_path, warm):
    one_step = ("trainer.steps=1", "trainer.save_every=0")
    base_run, tis_run = tmp_path / "base", tmp_path / "tis"
    train(base_run, warm, *one_step, "verl.old_log_prob=recompute")  # the same pi_old, without the weights
    train(tis_run, warm, *one_step, f"optim.tis_cap={CAP}", "optim.tis_level=token")  # implies recompute
    (base,), (tis,) = rows(base_run), rows(tis_run)
    assert step0_responses(base_run) == step0_responses(tis_run)  # the same samples, so the same batch
    assert base["verl/policy/skipped_step"] == tis["verl/policy/skipped_step"] == 0.0

    # the local backend's metric names; every raw ratio is 1 > 0.5, so every weight is the cap
    assert tis["train/tis_clipfrac"] == 1.0
    assert tis["train/tis_weight_mean"] == pytest.approx(CAP, abs=1e-7)
    assert abs(tis["train/mismatch_kl"]) <= 1e-5 and abs(tis["train/mismatch_k3_kl"]) <= 1e-8
    assert tis["verl/policy/rollout_corr/rollout_is_mean"] == tis["train/tis_weight_mean"]
    assert not any(k.startswith(("train/tis_", "train/mismatch_")) for k in base)  # off: no weights, no names
    assert "verl/policy/rollout_corr/kl" in base  # verl's mismatch diagnostics whenever pi_old is recomputed

    # the ratio is 1 in both (pi_old recomputed by the same actor), so weight 0.5 halves the policy gradient
    for r in (base, tis):
        assert abs(r["verl/policy/actor/ppo_kl"]) <= 1e-6
    assert base["verl/policy/actor/grad_norm"] > 0
    # (pg_loss itself is not compared: GRPO's advantages sum to 0 per group, so at ratio 1 it is fp32 noise)
    assert tis["verl/policy/actor/grad_norm"] == pytest.approx(
        CAP * base["verl/policy/actor/grad_norm"], rel=1e-4
    )
