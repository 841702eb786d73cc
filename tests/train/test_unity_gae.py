"""UnityMAS-O's GAE on the local backend: the clipped value loss (hand-computed), the critic (verl's value model
from the policy's weights, values read where the policy's log-probs are read, a value-loss step that learns),
the trainer end to end with a critic, its checkpoint and resume, and the verl backend's plan with a critic."""

from __future__ import annotations

import pytest
import torch

from metaagent.learn.checkpoint import load_checkpoint, save_checkpoint
from metaagent.learn.losses import GlobalBatch, value_loss
from metaagent.learn.optim import OptimizerConfig
from metaagent.learn.samples import Sample
from metaagent.train.config import TrainConfig
from metaagent.train.local.critic import Critic, load_value_model


def test_value_loss_is_half_the_mean_of_the_larger_of_clipped_and_unclipped_squared_errors():
    # token: (V_theta, V_old, R) with eps_v = 0.5
    #   (1.0, 0.5, 1.0): clip -> 1.0; (0)^2 vs (0)^2          -> 0
    #   (2.0, 0.5, 0.0): clip -> 1.0; (2)^2 = 4 vs (1)^2 = 1   -> 4 (unclipped larger)
    #   (2.0, 0.5, 3.0): clip -> 1.0; (1)^2 = 1 vs (2)^2 = 4   -> 4 (clipped larger: counted in clipfrac)
    vpreds = torch.tensor([[1.0, 2.0, 2.0]], requires_grad=True)
    old = torch.tensor([[0.5, 0.5, 0.5]])
    ret = torch.tensor([[1.0, 0.0, 3.0]])
    mask = torch.ones(1, 3)
    loss, m = value_loss(vpreds, ret, old, mask, cliprange_value=0.5, batch=GlobalBatch(3, 1))
    assert float(loss.detach()) == pytest.approx(0.5 * (0 + 4 + 4) / 3)
    assert m["train/critic/vf_clipfrac"] == pytest.approx(1 / 3)
    loss.backward()  # only the unclipped middle token has a gradient: d/dV 0.5 * (V - 0)^2 / 3 = 2 / 3
    assert vpreds.grad[0].tolist() == pytest.approx([0.0, 2 / 3, 0.0])
    # a micro-batch's share of a bigger batch: normalised by the whole batch's 6 tokens
    share, _ = value_loss(vpreds, ret, old, mask, cliprange_value=0.5, batch=GlobalBatch(6, 2))
    assert float(share.detach()) == pytest.approx(0.5 * 8 / 6)


@pytest.fixture
def value_model(tmp_path, make_model):
    policy = make_model(seed=5)
    policy.save_pretrained(tmp_path / "policy")
    return policy, load_value_model(str(tmp_path / "policy"))


def _sample(prompt, response, **kw):
    return Sample("executor", prompt, response, [-1.0] * len(response), 0.0, 1.0, "Coder", **kw)


def test_the_critic_starts_from_the_policy_weights_and_reads_values_where_log_probs_are_read(value_model):
    policy, vm = value_model
    assert torch.equal(vm.model.layers[0].mlp.up_proj.weight, policy.model.layers[0].mlp.up_proj.weight)
    assert vm.score.out_features == 1 and vm.dropout.p == 0.0  # verl: num_labels 1, no dropout
    critic = Critic(vm, optim=OptimizerConfig(lr=1e-3))
    long, short = _sample([3, 4, 5, 6], [7, 8, 9]), _sample([3, 4], [5])
    got = critic.values([long, short])
    with torch.no_grad():  # the value of response token t: the head on the hidden state of the context before it
        hidden = vm.model(torch.tensor([[3, 4, 5, 6, 7, 8, 9]])).last_hidden_state
        direct = vm.score(hidden)[0, 3:6, 0].tolist()
    assert len(got[0]) == 3 and len(got[1]) == 1
    assert got[0] == pytest.approx(direct, abs=1e-5)
    assert critic.values([short])[0] == pytest.approx(got[1], abs=1e-5)  # right padding changes nothing


def test_value_loss_steps_move_the_critic_towards_the_returns(value_model):
    _, vm = value_model
    critic = Critic(vm, optim=OptimizerConfig(lr=3e-3, weight_decay=0.0), cliprange_value=10.0)
    samples = [_sample([3, 4, 5], [6, 7]), _sample([9, 10], [11, 12, 13])]
    losses = []
    for _ in range(8):
        for s, v in zip(samples, critic.values(samples)):
            s.values, s.returns = v, [1.0] * len(v)
        m = critic.update(samples)
        losses.append(m["train/critic/vf_loss"])
    assert critic.steps == 8 and m["train/critic/skipped_step"] == 0.0
    assert losses[-1] < 0.25 * losses[0]
    assert critic.update([_sample([1], [2])])["train/critic/skipped_step"] == 1.0  # no returns: no step


def test_critic_weights_and_optimizer_are_saved_and_restored(tmp_path, value_model, make_model):
    policy, vm = value_model
    critic = Critic(vm, optim=OptimizerConfig(lr=1e-3))
    s = _sample([3, 4, 5], [6, 7])
    s.values, s.returns = critic.values([s])[0], [2.0, 2.0]
    critic.update([s])
    path = save_checkpoint(tmp_path / "run", 3, models={"policy": policy}, critics={"policy": critic})
    assert (path / "critics" / "policy" / "config.json").is_file()
    other = Critic(load_value_model(str(tmp_path / "policy")), optim=OptimizerConfig(lr=1e-3))
    assert not torch.equal(other.model.score.weight, critic.model.score.weight)
    load_checkpoint(path, critics={"policy": other})
    for (n, a), (_, b) in zip(critic.model.named_parameters(), other.model.named_parameters()):
        assert torch.equal(a, b), n
    assert other.steps == 1
    assert other.optimizer.state_dict()["state"][0]["exp_avg"].abs().sum() > 0


@pytest.fixture
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


GAE_RUN = [
    "policy.model=tiny", "rollout.executor.max_tokens=8", "rollout.n_executions=2", "data.batch_size=1",
    "algo.options={mode: gae, gamma: 1.0, lam: 1.0}", "critic.lr=1e-4",
]  # fmt: skip


def test_unity_code_under_gae_trains_a_critic_and_resumes_it(tmp_path, one_thread):
    from metaagent.records import read_trees
    from metaagent.train.loop import TrainLoop

    out = tmp_path / "run"
    cfg = TrainConfig.load("unity_code", [*GAE_RUN, "trainer.steps=1", f"trainer.out={out}"])
    with TrainLoop(cfg) as trainer:
        metrics = trainer.train()[0].metrics
        critic = trainer.backend.critics["policy"]
        saved = {n: p.detach().clone() for n, p in critic.model.named_parameters()}
    # the random tiny model fails every node: r = -1 on each of the 16 invocations, yet A = r - V differs per
    # token (the fresh critic's values differ), so the actor gets a gradient and the critic a target of -1
    assert metrics["reward/turn/Coder"] == -1.0 and metrics["samples/token_stage_actions"] == 16
    assert metrics["credit/returns_mean"] == pytest.approx(-1.0)
    assert metrics["credit/token_adv_std"] > 0.5 and metrics["train/skipped_step"] == 0.0
    assert metrics["train/critic/skipped_step"] == 0.0 and metrics["train/critic/vf_loss"] > 0
    trees, _ = read_trees(out / "rollouts" / "step_000000.jsonl")
    assert {t.advantage for t in trees[0].designs[0].executions[0].turns} == {-1.0}  # raw r in the records
    # resume: the critic comes back with the trained weights and one optimizer step
    cfg2 = TrainConfig.load("unity_code", [*GAE_RUN, "trainer.steps=2", f"trainer.out={out}"])
    with TrainLoop(cfg2, resume=True) as resumed:
        assert resumed.start_step == 1 and resumed.backend.critics["policy"].steps == 1
        for n, p in resumed.backend.critics["policy"].model.named_parameters():
            assert torch.equal(p, saved[n]), n


def test_gae_on_the_verl_backend_plans_a_critic_worker_group_per_model():
    """The verl side of the same estimator (tests/verl/test_verl_critic.py, test_verl_gae_cpu.py run it)."""
    from metaagent.train.verl_backend.plan import resolve_plan
    from metaagent.train.loop import TrainLoop
    from metaagent.train.verl_backend.backend import VerlBackend

    assert resolve_plan(TrainConfig.load("unity_code", ["algo.options={mode: gae}", "trainer.backend=verl"])).critic
    assert not resolve_plan(TrainConfig.load("unity_code", ["trainer.backend=verl"])).critic  # whiten: no critic
    assert VerlBackend.capabilities.critic and VerlBackend.capabilities.token_advantages
