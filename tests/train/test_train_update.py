"""PolicyUpdater: micro-batch accumulation equals the big batch; inactive roles give exactly zero gradient."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from metaagent.credit import assign_credit
from metaagent.learn.logprobs import naive_response_logprobs, response_logprobs
from metaagent.learn.losses import GlobalBatch, LossConfig, policy_loss
from metaagent.learn.samples import build_samples, collate
from metaagent.train.schedule import StageSchedule
from metaagent.config import ConfigError
from metaagent.train.local.update import PolicyUpdater, UpdateError

TEMPS = {"designer": 1.0, "executor": 1.0}


def grads(model):
    return {n: None if p.grad is None else p.grad.detach().clone() for n, p in model.named_parameters()}


def params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def assert_same(a, b, exact=False, **tol):
    assert a.keys() == b.keys()
    for k in a:
        if a[k] is None or b[k] is None:
            assert a[k] is None and b[k] is None, k
        elif exact:
            assert torch.equal(a[k], b[k]), k
        else:
            torch.testing.assert_close(a[k], b[k], msg=k, **tol)


def test_micro_batches_accumulate_to_the_big_batch_gradient(make_model, make_samples):
    samples = make_samples(12, seed=11)
    big, small = make_model(), make_model()
    u_big = PolicyUpdater(big, micro_batch_tokens=10**6, lr=1e-3)
    u_small = PolicyUpdater(small, micro_batch_tokens=24, lr=1e-3)
    m_big = u_big.accumulate(samples)
    m_small = u_small.accumulate(samples)
    n_roles = len({s.role for s in samples})
    assert m_big["train/micro_batches"] == n_roles and m_small["train/micro_batches"] >= 6
    assert_same(grads(small), grads(big), atol=1e-6, rtol=1e-5)
    for k in ("train/loss", "train/pg_clipfrac", "train/ppo_kl", "train/entropy", "train/tokens"):
        assert m_small[k] == pytest.approx(m_big[k], rel=1e-5, abs=1e-7), k

    # independent reference: L = L_D + L_E, one naive full-logits pass per role, each aggregated over its role
    ref = make_model()
    total = 0.0
    for role in sorted({s.role for s in samples}):
        group = [s for s in samples if s.role == role]
        batch = collate(group)
        lp, _ = naive_response_logprobs(ref, batch)
        loss, _ = policy_loss(
            lp,
            batch["old_log_probs"],
            batch["advantages"],
            batch["response_mask"],
            config=LossConfig(),
            batch=GlobalBatch(int(batch["response_mask"].sum()), len(group)),
        )
        loss.backward()
        total += float(loss.detach())
    assert_same(grads(big), grads(ref), atol=1e-6, rtol=1e-5)
    assert m_big["train/loss"] == pytest.approx(total, rel=1e-5)

    s_big, s_small = u_big.step(), u_small.step()
    assert s_big["train/grad_norm"] == pytest.approx(s_small["train/grad_norm"], rel=1e-5)
    assert_same(params(small), params(big), atol=1e-6, rtol=1e-5)
    assert u_big.steps == u_small.steps == 1


def test_inactive_role_contributes_exactly_zero_gradient(make_model, make_samples):
    samples = make_samples(10, seed=12)
    executor_only = [s for s in samples if s.role == "executor"]
    designer_only = [s for s in samples if s.role == "designer"]
    assert executor_only and designer_only

    mixed, pure, check = make_model(), make_model(), make_model()
    m_mixed = PolicyUpdater(mixed, micro_batch_tokens=30).accumulate(samples, active_roles={"executor"})
    m_pure = PolicyUpdater(pure, micro_batch_tokens=30).accumulate(executor_only)
    assert_same(grads(mixed), grads(pure), exact=True)  # bit-for-bit: designer samples never forwarded
    assert m_mixed["train/samples_inactive/designer"] == len(designer_only)
    assert m_mixed["train/samples/designer"] == 0 and m_mixed["train/tokens"] == m_pure["train/tokens"]

    # the designer samples do carry gradient when their role is active, so the equality above is not vacuous
    PolicyUpdater(check, micro_batch_tokens=30).accumulate(samples, active_roles={"executor", "designer"})
    assert any(not torch.equal(a, b) for a, b in zip(grads(check).values(), grads(pure).values()))

    # a designer-only batch in an executor stage: no gradient at all, no optimizer step, weights unchanged
    lone = make_model()
    before = params(lone)
    u = PolicyUpdater(lone, lr=1e-2)
    m = u.update(designer_only, active_roles={"executor"})
    assert all(g is None for g in grads(lone).values())
    assert m["train/skipped_step"] == 1.0 and u.steps == 0
    assert_same(params(lone), before, exact=True)

    # and the same the other way round
    a, b = make_model(), make_model()
    PolicyUpdater(a).accumulate(samples, active_roles={"designer"})
    PolicyUpdater(b).accumulate(designer_only)
    assert_same(grads(a), grads(b), exact=True)


def test_stage_schedule_and_build_samples_mask_the_inactive_role(make_model, make_token_tree):
    trees = [
        make_token_tree([[1.0, 0.0], [0.0, 0.0]], seed=1),
        make_token_tree([[1.0, 1.0], [0.0, 1.0]], seed=2),
    ]
    assign_credit(trees)
    schedule = StageSchedule("stagewise", 30)
    for step, role in ((0, "executor"), (30, "designer")):
        active = schedule.active_roles(step)
        samples = build_samples(trees, active_roles=active, temperatures=TEMPS)
        assert {s.role for s in samples} == {role}
        all_samples = build_samples(trees, active_roles={"designer", "executor"}, temperatures=TEMPS)
        a, b = make_model(), make_model()
        PolicyUpdater(a).accumulate(samples)
        PolicyUpdater(b).accumulate(all_samples, active_roles=active)
        assert_same(grads(a), grads(b), exact=True)


def test_update_moves_log_probs_in_the_direction_of_the_advantage(make_model, make_samples):
    model = make_model()
    samples = make_samples(4, seed=13)
    with torch.no_grad():
        before, _ = response_logprobs(model, collate(samples))
    for row, s in enumerate(samples):  # on-policy: pi_old = current policy
        s.old_logprobs = before[row, : len(s.response_ids)].tolist()
        s.advantage = 1.0 if row % 2 == 0 else -1.0
    u = PolicyUpdater(model, lr=1e-2, weight_decay=0.0)
    m = u.update(samples)
    assert m["train/ppo_kl"] == pytest.approx(0.0, abs=1e-6) and m["train/pg_clipfrac"] == 0.0
    assert m["train/skipped_step"] == 0.0 and m["train/grad_norm"] > 0 and m["train/tokens_per_s"] > 0
    with torch.no_grad():
        after, _ = response_logprobs(model, collate(samples))
    for row, s in enumerate(samples):
        r = len(s.response_ids)
        delta = float((after[row, :r] - before[row, :r]).sum())
        assert delta > 0 if s.advantage > 0 else delta < 0


def test_non_finite_gradient_skips_the_step(make_model, make_samples):
    model = make_model()
    samples = make_samples(3)
    samples[0].advantage = float("nan")
    before = params(model)
    u = PolicyUpdater(model, lr=1e-2)
    m = u.update(samples)
    assert m["train/nonfinite_grad"] == 1.0 and m["train/skipped_step"] == 1.0 and u.steps == 0
    assert_same(params(model), before, exact=True)
    assert all(p.grad is None for p in model.parameters())


def test_kl_entropy_and_bf16_autocast(make_model, make_samples):
    samples = make_samples(4, seed=14)
    model = make_model()
    ref = copy.deepcopy(model)
    m = PolicyUpdater(model, ref_model=ref, kl_coef=0.1, entropy_coef=0.01).update(samples)
    assert m["train/kl_loss"] == pytest.approx(0.0, abs=1e-6)  # the reference is the starting policy
    assert m["train/entropy"] > 0 and "train/entropy_loss" in m

    fp32, bf16 = make_model(), make_model()
    PolicyUpdater(fp32).accumulate(samples)
    mb = PolicyUpdater(bf16, autocast="bfloat16").accumulate(samples)
    assert torch.isfinite(torch.tensor(mb["train/loss"]))
    assert all(p.dtype == torch.float32 for p in bf16.parameters())  # fp32 master weights
    g32 = torch.cat([p.grad.flatten() for p in fp32.parameters()])
    g16 = torch.cat([p.grad.flatten() for p in bf16.parameters()])
    assert torch.nn.functional.cosine_similarity(g32, g16, dim=0) > 0.95


def test_state_dict_round_trip(make_model, make_samples):
    model = make_model()
    u = PolicyUpdater(model, lr=1e-3)
    u.update(make_samples(4))
    u2 = PolicyUpdater(copy.deepcopy(model), lr=1e-3)
    u2.load_state_dict(u.state_dict())
    assert u2.steps == 1
    s1, s2 = u.optimizer.state_dict()["state"], u2.optimizer.state_dict()["state"]
    assert s1.keys() == s2.keys() and all(torch.equal(s1[k]["exp_avg"], s2[k]["exp_avg"]) for k in s1)


def test_misconfiguration_is_refused(make_model, make_samples):
    with pytest.raises(UpdateError, match="fp32 master weights"):
        PolicyUpdater(make_model().to(torch.bfloat16))
    with pytest.raises(UpdateError, match="unknown updater setting.*learning_rate"):
        PolicyUpdater(make_model(), learning_rate=1e-5)
    with pytest.raises(UpdateError, match="ref_model"):
        PolicyUpdater(make_model(), kl_coef=0.1)
    with pytest.raises(ConfigError, match="autocast = 'float16': Input should be 'auto' or 'bfloat16'"):
        PolicyUpdater(make_model(), autocast="float16")
    with pytest.raises(ConfigError, match="lr = 0.0: Input should be greater than 0"):
        PolicyUpdater(make_model(), lr=0.0)
    with pytest.raises(UpdateError, match="needs total_steps"):
        PolicyUpdater(make_model(), schedule="cosine")
    with pytest.raises(UpdateError, match="expected Sample"):
        PolicyUpdater(make_model()).update([{"role": "executor"}])
    with pytest.raises(UpdateError, match="unknown role"):
        PolicyUpdater(make_model()).update(make_samples(2), active_roles={"critic"})


def test_naive_reference_implementation_gives_the_same_gradient(make_model, make_samples):
    samples = make_samples(5, seed=15)
    a, b = make_model(), make_model()
    ma = PolicyUpdater(a, logprob_chunk=4).accumulate(samples)
    mb = PolicyUpdater(b, logprob_impl="naive").accumulate(samples)
    assert_same(grads(a), grads(b), atol=1e-6, rtol=1e-5)
    assert ma["train/entropy"] == pytest.approx(mb["train/entropy"], rel=1e-5)


def test_update_routed_separate_models(make_model, make_samples):
    from metaagent.train.local.update import update_routed

    samples = make_samples(6, seed=16)
    d_model, e_model = make_model(seed=1), make_model(seed=2)
    updaters = {"D": PolicyUpdater(d_model, lr=1e-2), "E": PolicyUpdater(e_model, lr=1e-2)}
    before_d = params(d_model)
    m = update_routed(updaters, samples, {"designer": "D", "executor": "E"}, active_roles={"executor"})
    assert m["train/D/skipped_step"] == 1.0 and m["train/E/skipped_step"] == 0.0
    assert m["train/D/samples_inactive/designer"] == 3 and m["train/E/samples/executor"] == 3
    assert_same(params(d_model), before_d, exact=True)  # designer stage off: its model is untouched
    single = update_routed({"policy": PolicyUpdater(make_model())}, samples, {"*": "policy"})
    assert single["train/samples"] == 6
    with pytest.raises(UpdateError, match="no updater"):
        update_routed({"D": updaters["D"]}, samples, {"designer": "D", "executor": "E"})


def test_coupled_loss_is_the_sum_of_each_roles_own_loss(make_model, make_samples):
    """coupled mode: L = L_D + L_E, each aggregated over its own role's samples, not one mean over both."""
    samples = make_samples(10, seed=21)
    roles = {s.role for s in samples}
    assert roles == {"designer", "executor"}
    both = PolicyUpdater(make_model(), lr=1e-3)
    m_both = both.accumulate(samples, active_roles=roles)
    per_role = 0.0
    for role in sorted(roles):
        u = PolicyUpdater(make_model(), lr=1e-3)
        per_role += u.accumulate(samples, active_roles={role})["train/loss"]
    assert m_both["train/loss"] == pytest.approx(per_role, rel=1e-6)


def test_no_optimizer_step_when_every_advantage_is_zero(make_model, make_samples):
    """An all-zero-advantage batch has no policy gradient; AdamW would still move the weights (momentum and
    weight decay), so the step is skipped."""
    import dataclasses

    samples = [dataclasses.replace(s, advantage=0.0) for s in make_samples(6, seed=22)]
    model = make_model()
    before = params(model)
    u = PolicyUpdater(model, lr=1e-2, weight_decay=0.1)
    m = u.update(samples)
    assert m["train/skipped_step"] == 1.0 and m["train/zero_advantage_step"] == 1.0
    assert u.steps == 0
    assert_same(params(model), before, atol=0, rtol=0)


def test_reset_moments_clears_adam_state(make_model, make_samples):
    u = PolicyUpdater(make_model(), lr=1e-3)
    u.update(make_samples(6, seed=23))
    assert len(u.optimizer.state) > 0
    u.reset_moments()
    assert len(u.optimizer.state) == 0
    u.update(make_samples(6, seed=24))  # AdamW re-initialises its moments lazily
    assert all(int(st["step"]) == 1 for st in u.optimizer.state.values())


def test_dpo_pairs_through_the_updater_match_the_loss_on_naive_log_probs(make_model):
    from metaagent.learn.losses import dpo_loss
    from metaagent.learn.samples import PairSample

    model, ref = make_model(), make_model()
    pairs = [PairSample("executor", [1, 2, 3], [4, 5], [6, 7, 8], weight=2.0), PairSample("executor", [9, 3], [2], [5, 5])]
    u = PolicyUpdater(model, ref_model=ref, lr=1e-3)
    m = u.accumulate_pairs(pairs, beta=0.2)
    chosen, rejected = zip(*(p.sides() for p in pairs))
    probe = make_model()
    lp_c, _ = naive_response_logprobs(probe, collate(list(chosen)))
    lp_r, _ = naive_response_logprobs(probe, collate(list(rejected)))
    with torch.no_grad():
        ref_c, _ = naive_response_logprobs(ref, collate(list(chosen)))
        ref_r, _ = naive_response_logprobs(ref, collate(list(rejected)))
    loss, _ = dpo_loss(lp_c.sum(-1), lp_r.sum(-1), ref_c.sum(-1), ref_r.sum(-1), beta=0.2, weights=torch.tensor([2.0, 1.0]))
    assert m["train/dpo_loss"] == pytest.approx(loss.item(), rel=1e-5, abs=1e-6)
    assert m["train/dpo_loss"] == pytest.approx((2 + 1) / 2 * math.log(2), rel=1e-4)  # same init: margins 0
    assert u.step()["train/skipped_step"] == 0.0


def _backward_ops(updater, samples):
    """aten op name -> how often backward ran it (recomputed forward ops included)."""
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    counter = Count()
    original = torch.Tensor.backward

    def counted(self, *a, **k):
        with counter:
            return original(self, *a, **k)

    torch.Tensor.backward = counted
    try:
        updater.accumulate(samples)
    finally:
        torch.Tensor.backward = original
    return counter.ops


@pytest.mark.parametrize("autocast", [None, "bfloat16"])
def test_recompute_modes_give_the_same_gradient_and_recompute_what_they_say(make_model, make_samples, autocast):
    samples = make_samples(6, seed=21)
    out = {}
    for mode in ("off", "selective", "full"):
        model = make_model()
        ops = _backward_ops(PolicyUpdater(model, micro_batch_tokens=40, autocast=autocast, recompute=mode), samples)
        out[mode] = grads(model), ops
    for mode in ("selective", "full"):
        assert_same(out[mode][0], out["off"][0], exact=True)
    off, selective, full = (out[m][1] for m in ("off", "selective", "full"))
    assert off["rsqrt"] == 0 and selective["rsqrt"] > 0 and full["rsqrt"] == selective["rsqrt"]  # norms recomputed
    assert selective["mm"] == off["mm"] < full["mm"]  # selective keeps the products' outputs; full recomputes them
    with pytest.raises(ConfigError, match="recompute"):
        PolicyUpdater(make_model(), recompute="some")
