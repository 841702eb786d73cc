"""Designer-side training knobs per role (issue 62 item 2), each on a hand example:

- ``optim.per_role.<role>.loss_agg_mode`` / ``.entropy_coef``: a role's own aggregation and entropy bonus
  (unset: the shared ``optim`` setting), applied by the local update to that role's samples only;
- ``algo.normalize: none | batch | role``: the step's advantages divided by one std, or by each role's own
  (Dr. MAS, arXiv 2602.08847, Eq. 5);
- ``rollout.m_designs`` up to 8: the designer group of Eq. 4-5 with M = 8.
"""

from __future__ import annotations

import math

import pytest
import torch
from builders import make_tree

from metaagent.config import ConfigError
from metaagent.credit import CreditError, assign_credit
from metaagent.credit.normalize import normalize_advantages
from metaagent.learn.logprobs import response_logprobs
from metaagent.learn.losses import GlobalBatch, policy_loss
from metaagent.learn.optim import LossConfig, RoleLoss
from metaagent.learn.samples import Sample, build_samples, collate
from metaagent.train.config import TrainConfig
from metaagent.train.local.update import PolicyUpdater

# ---- optim.per_role ----------------------------------------------------------------------------------------


def test_per_role_settings_default_to_the_shared_ones_and_are_checked():
    cfg = TrainConfig.load(None, ["optim.entropy_coef=0.02", "optim.per_role.designer.loss_agg_mode=token-sum"])
    loss = cfg.optim.loss()
    d, e = loss.for_role("designer"), loss.for_role("executor")
    assert (d.loss_agg_mode, d.entropy_coef) == ("token-sum", 0.02)  # entropy: the shared setting
    assert (e.loss_agg_mode, e.entropy_coef) == ("seq-mean-token-mean", 0.02)
    assert loss.role_differences() == {"loss_agg_mode": ("token-sum", "seq-mean-token-mean")}
    assert LossConfig().for_role("designer") == LossConfig() and LossConfig().role_differences() == {}
    with pytest.raises(ConfigError, match="loss_agg_mode = 'token-max'"):
        TrainConfig.load(None, ["optim.per_role.designer.loss_agg_mode=token-max"])
    with pytest.raises(ConfigError, match="did you mean optim.per_role.executor.entropy_coef"):
        TrainConfig.load(None, ["optim.per_role.executor.entropy_coeff=0.1"])
    with pytest.raises(ConfigError, match="known keys of optim.per_role: designer, executor"):
        TrainConfig.load(None, ["optim.per_role.critic.entropy_coef=0.1"])
    with pytest.raises(ConfigError, match="greater than or equal to 0"):
        RoleLoss(entropy_coef=-0.1)


# lengths 2, 4 (designer) and 3, 1 (executor); advantages +1, -0.25 and +0.5, -1. At ratio 1, vanilla PPO's token
# loss is -A, so each aggregation is a hand sum:
D_LEN, D_ADV = (2, 4), (1.0, -0.25)
E_LEN, E_ADV = (3, 1), (0.5, -1.0)
HAND = {
    # sum_t -A_t
    "token-sum": {"designer": -(1.0 * 2 - 0.25 * 4), "executor": -(0.5 * 3 - 1.0 * 1)},  # -1.0, -0.5
    # (1/|G|) sum_i mean_t(-A_i)
    "seq-mean-token-mean": {"designer": -(1.0 - 0.25) / 2, "executor": -(0.5 - 1.0) / 2},  # -0.375, 0.25
    # (1/|G|) sum_i sum_t(-A_i) / (the role's longest response: 4 and 3)
    "seq-mean-token-sum-norm": {"designer": -(2.0 - 1.0) / 2 / 4, "executor": -(1.5 - 1.0) / 2 / 3},
}


def _matrix(lengths, advs):
    width = max(lengths)
    mask = torch.tensor([[1.0] * n + [0.0] * (width - n) for n in lengths])
    adv = torch.tensor([[a] * width for a in advs]) * mask
    return mask, adv


@pytest.mark.parametrize("mode", sorted(HAND))
def test_each_aggregation_on_a_hand_example(mode):
    for role, (lengths, advs) in {"designer": (D_LEN, D_ADV), "executor": (E_LEN, E_ADV)}.items():
        mask, adv = _matrix(lengths, advs)
        lp = torch.zeros_like(mask)
        batch = GlobalBatch(int(mask.sum()), len(lengths), max(lengths) if mode == "seq-mean-token-sum-norm" else None)
        loss, m = policy_loss(lp, lp, adv, mask, config=LossConfig(loss_agg_mode=mode), batch=batch)
        assert float(loss) == pytest.approx(HAND[mode][role], abs=1e-6), (mode, role)


def _samples(model) -> list[Sample]:
    """Designer and executor samples of the hand example whose old log-probs are the model's own (ratio 1)."""
    gen = torch.Generator().manual_seed(3)
    out = []
    for role, lengths, advs in (("designer", D_LEN, D_ADV), ("executor", E_LEN, E_ADV)):
        for i, (n, a) in enumerate(zip(lengths, advs)):
            prompt = torch.randint(1, 60, (3,), generator=gen).tolist()
            response = torch.randint(1, 60, (n,), generator=gen).tolist()
            out.append(Sample(role, prompt, response, [0.0] * n, a, 1.0, "" if role == "designer" else "Solver",
                              key=(len(out),)))  # fmt: skip
    for role in ("designer", "executor"):  # one collate per role, as the updater's one micro-batch of that role
        group = [s for s in out if s.role == role]
        with torch.no_grad():
            lp, _ = response_logprobs(model, collate(group))
        for row, s in enumerate(group):
            s.old_logprobs = lp[row, : len(s.response_ids)].tolist()
    return out


@pytest.mark.parametrize(("designer", "executor"), [("token-sum", "seq-mean-token-mean"),
                                                    ("seq-mean-token-sum-norm", "token-sum")])  # fmt: skip
def test_the_update_aggregates_each_roles_samples_with_its_own_mode(make_model, designer, executor):
    model = make_model()
    samples = _samples(model)
    per_role = {"designer": {"loss_agg_mode": designer}, "executor": {"loss_agg_mode": executor}}
    u = PolicyUpdater(model, micro_batch_tokens=10**6, lr=1e-3, per_role=per_role)
    m = u.accumulate(samples)
    want = HAND[designer]["designer"] + HAND[executor]["executor"]  # L_D + L_E, each with its own mode
    assert m["train/pg_loss"] == pytest.approx(want, abs=1e-6)
    # the gradient is the sum of two updaters that each train one role with that role's mode as the shared one
    total = None
    for role, mode in (("designer", designer), ("executor", executor)):
        other = make_model()
        PolicyUpdater(other, micro_batch_tokens=10**6, lr=1e-3, loss_agg_mode=mode).accumulate(
            samples, active_roles={role}
        )
        g = [p.grad.clone() for p in other.parameters()]
        total = g if total is None else [a + b for a, b in zip(total, g)]
    for p, g in zip(model.parameters(), total):
        torch.testing.assert_close(p.grad, g, atol=1e-6, rtol=1e-5)


def test_the_entropy_bonus_is_the_designers_only(make_model):
    model = make_model()
    samples = _samples(model)
    u = PolicyUpdater(model, micro_batch_tokens=10**6, lr=1e-3, per_role={"designer": {"entropy_coef": 0.1}})
    m = u.accumulate(samples)
    # the designer's entropies aggregated by hand (seq-mean-token-mean): the mean over each response, then over
    # the 2 designer samples; the executor's 0 coefficient adds nothing
    group = [s for s in samples if s.role == "designer"]
    with torch.no_grad():
        _, ent = response_logprobs(model, collate(group), with_entropy=True)
    per_seq = [float(ent[i, : len(s.response_ids)].mean()) for i, s in enumerate(group)]
    assert m["train/entropy_loss"] == pytest.approx(sum(per_seq) / 2, abs=1e-6)
    pg = HAND["seq-mean-token-mean"]["designer"] + HAND["seq-mean-token-mean"]["executor"]
    assert m["train/pg_loss"] == pytest.approx(pg, abs=1e-6)
    assert m["train/loss"] == pytest.approx(pg - 0.1 * sum(per_seq) / 2, abs=1e-6)


# ---- algo.normalize (Dr. MAS) ------------------------------------------------------------------------------


def _adv_samples(designer, executor) -> list[Sample]:
    rows = [("designer", a) for a in designer] + [("executor", a) for a in executor]
    return [Sample(r, [1], [2], [0.0], a, 1.0, key=(i,)) for i, (r, a) in enumerate(rows)]


EPS = 1e-6
D = [1.0, -1.0, 0.5, 0.0]
E = [2.0, -2.0, 0.0]
# designer: mean 0.5/4 = 0.125; squared deviations 0.875^2 + 1.125^2 + 0.375^2 + 0.125^2 = 2.1875; / (4 - 1)
SIGMA_D = math.sqrt(2.1875 / 3)  # 0.853912563829...
SIGMA_E = math.sqrt((4 + 4 + 0) / 2)  # mean 0: 2.0
# both: mean 0.5/7; sum of squares 1 + 1 + 0.25 + 0 + 4 + 4 + 0 = 10.25, less 7 * mean^2; / (7 - 1)
SIGMA_B = math.sqrt((10.25 - 7 * (0.5 / 7) ** 2) / 6)  # 1.3047532...


def test_role_normalisation_divides_each_role_by_its_own_std():
    samples = _adv_samples(D, E)
    m = normalize_advantages(samples, "role", eps=EPS)
    assert SIGMA_D == pytest.approx(0.8539125638, abs=1e-9) and SIGMA_B == pytest.approx(1.3047532, abs=1e-6)
    got = [s.advantage for s in samples]
    want = [a / (SIGMA_D + EPS) for a in D] + [a / (SIGMA_E + EPS) for a in E]
    assert got == pytest.approx(want, abs=1e-6)
    assert got[:4] == pytest.approx([1.1710787, -1.1710787, 0.5855394, 0.0], abs=1e-6)  # a / (0.8539126 + 1e-6)
    assert got[4:] == pytest.approx([1.0, -1.0, 0.0], abs=1e-6)
    assert m["credit/normalize_std/designer"] == pytest.approx(SIGMA_D, abs=1e-9)
    assert m["credit/normalize_std/executor"] == pytest.approx(2.0, abs=1e-9)
    assert m["credit/normalize_skipped/designer"] == m["credit/normalize_skipped/executor"] == 0.0


def test_batch_normalisation_divides_every_sample_by_one_std_and_none_changes_nothing():
    samples = _adv_samples(D, E)
    m = normalize_advantages(samples, "batch", eps=EPS)
    assert [s.advantage for s in samples] == pytest.approx([a / (SIGMA_B + EPS) for a in D + E], abs=1e-6)
    assert m["credit/normalize_scale/designer"] == m["credit/normalize_scale/executor"]
    samples = _adv_samples(D, E)
    assert normalize_advantages(samples, "none") == {} and [s.advantage for s in samples] == D + E


def test_a_role_without_spread_is_left_as_it_is_and_per_token_advantages_are_refused():
    samples = _adv_samples([0.7], [0.0, 0.0, 0.0])  # one designer sample; executor ties (zero-variance groups)
    m = normalize_advantages(samples, "role", eps=EPS)
    assert [s.advantage for s in samples] == [0.7, 0.0, 0.0, 0.0]
    assert m["credit/normalize_skipped/designer"] == m["credit/normalize_skipped/executor"] == 1.0
    token = _adv_samples([1.0, -1.0], [])
    token[0].token_advantages = [1.0]
    with pytest.raises(CreditError, match="per-token advantages"):
        normalize_advantages(token, "role")
    with pytest.raises(CreditError, match="algo.normalize must be one of"):
        normalize_advantages(token, "agent")
    with pytest.raises(ConfigError, match="algo.normalize = 'agent'"):
        TrainConfig.load(None, ["algo.normalize=agent"])
    assert TrainConfig.load(None, []).algo.normalize == "none"


# ---- M up to 8 -----------------------------------------------------------------------------------------------


def test_eight_designs_form_one_designer_group():
    """Eq. 4-5 with M = 8, N = 2: design rewards are row means, advantages (Rbar - mean) / (std + eps)."""
    rows = [[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 1.0], []]
    # Rbar = 1, .5, 0, .5, 0, 1, .5, 0 (the invalid design earns 0): mean 3.5 / 8 = 0.4375; squared deviations
    # 2 * .5625^2 + 3 * .0625^2 + 3 * .4375^2 = 0.6328125 + 0.01171875 + 0.57421875 = 1.21875; std = sqrt(1.21875 / 7)
    rbar = [1.0, 0.5, 0.0, 0.5, 0.0, 1.0, 0.5, 0.0]
    std = math.sqrt(1.21875 / 7)  # 0.4172615...
    tree = make_tree(rows, seed=4)
    assign_credit([tree], "hierarchical")
    got = [d.advantage for d in tree.designs]
    assert got == pytest.approx([(r - 0.4375) / (std + 1e-6) for r in rbar], abs=1e-6)
    assert got[0] == pytest.approx(1.3480723, abs=1e-6) and got[2] == pytest.approx(-1.0485007, abs=1e-6)
    samples = build_samples([tree], active_roles={"designer"}, temperatures={"designer": 1.0, "executor": 1.0})
    assert len(samples) == 8
    cfg = TrainConfig.load(None, ["rollout.m_designs=8"])
    assert cfg.rollout.m_designs == 8


# ---- the training loop ---------------------------------------------------------------------------------------


def test_one_coupled_step_applies_the_knobs_and_records_the_designer_prompt(tmp_path, monkeypatch):
    """The tiny model with scripted replies (builders.forced_generate): M = 8, the designer's own token-sum,
    role normalisation and no domain sentence in one coupled step; the checkpoint records the prompt it was
    trained with, so eval's and serve's ``auto`` follow it."""
    import json

    from builders import forced_generate, seed_of
    from warm_tiny import SCRIPT, TAGGED, TRAIN_SPEC, UNTAGGED

    from metaagent.learn.metrics import read_metrics
    from metaagent.policy.hf import HFPolicy
    from metaagent.policy.models import PROMPT_FILE
    from metaagent.records import read_trees
    from metaagent.train.loop import TrainLoop

    def reply(request) -> str:
        if request.role == "designer":
            return f"```python\n{SCRIPT}```"
        return TAGGED if seed_of(request) % 2 == 0 else UNTAGGED

    monkeypatch.setattr(HFPolicy, "_generate", forced_generate(reply))
    out = tmp_path / "run"
    cfg = TrainConfig.load(None, [
        "policy.model=tiny", "policy.max_batch_size=16", "policy.continuous=false", f"data.train=[{json.dumps(TRAIN_SPEC)}]",
        "data.val=[]", "data.batch_size=1", "rollout.m_designs=8", "rollout.n_executions=1", "rollout.k_templates=0",
        "rollout.designer_prompt=compact", "rollout.domain_hint=off", "rollout.designer.max_tokens=40",
        "rollout.executor.max_tokens=16", "rollout.executor.stop=['</delivery>']", "rollout.sandbox_workers=2",
        "schedule.mode=coupled", "algo.normalize=role", "optim.per_role.designer.loss_agg_mode=token-sum",
        "trainer.steps=1", "trainer.save_every=1", "trainer.tensorboard=false", f"trainer.out={out}",
    ])  # fmt: skip
    with TrainLoop(cfg) as trainer:
        assert trainer.backend.updaters["policy"].loss.for_role("designer").loss_agg_mode == "token-sum"
        trainer.train()
    (row,) = [r for r in read_metrics(out / "metrics.jsonl")[0] if r["step"] == 0]
    assert row["credit/designs"] == 8 and row["samples/designer"] == 8
    assert row["credit/normalize_scale/executor"] > 0 and "credit/normalize_std/designer" in row
    (tree,), bad = read_trees(out / "rollouts" / "step_000000.jsonl")
    assert not bad and len(tree.designs) == 8
    assert all(d.sample.messages[1]["content"].startswith("Task:\n") for d in tree.designs)  # no domain line
    saved = out / "checkpoints" / "step_00000001" / "models" / "policy" / PROMPT_FILE
    assert json.loads(saved.read_text()) == {"designer_prompt": "compact", "domain_hint": "off"}
