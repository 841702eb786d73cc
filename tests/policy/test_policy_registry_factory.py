"""PolicyRegistry role resolution and build_policy / build_registry."""

from __future__ import annotations

import pytest

from metaagent.policy import (
    BatchingPolicy,
    HFPolicy,
    PolicyRegistry,
    ScriptedPolicy,
    build_policy,
    build_registry,
)


def _p(name: str) -> ScriptedPolicy:
    return ScriptedPolicy(["x"], cycle=True, model_id=name)


def test_shared_registry_is_one_physical_policy():
    p = _p("m")
    reg = PolicyRegistry.shared(p)
    assert reg.for_role("designer") is p and reg.for_role("executor") is p
    assert reg.for_role("executor:Solver") is p  # falls back to the base role
    assert reg.physical() == [p] and reg.is_shared
    assert reg.models() == {"designer": "m", "executor": "m"}


def test_separate_and_pattern_roles():
    d, e, critic, judge = _p("d"), _p("e"), _p("critic"), _p("judge")
    reg = PolicyRegistry(
        {"designer": d, "executor": e, "executor:*Critic*": critic, "executor:Judge": judge, "executor:*": e}
    )
    assert reg.for_role("designer") is d
    assert reg.for_role("executor") is e
    assert reg.for_role("executor:MathCritic") is critic
    assert reg.for_role("executor:Judge") is judge  # exact key beats the patterns
    assert reg.for_role("executor:Solver") is e
    assert reg.resolve("executor:CodeCriticV2") == "executor:*Critic*"
    assert reg.physical() == [d, e, critic, judge] and not reg.is_shared
    assert reg.roles_of(e) == ["executor", "executor:*"]
    assert reg.models()["executor:*Critic*"] == "critic"


def test_missing_role_error_lists_configured_roles():
    reg = PolicyRegistry({"designer": _p("d")})
    with pytest.raises(KeyError, match=r"no policy for role 'executor:Solver'.*\['designer'\]"):
        reg.for_role("executor:Solver")


@pytest.mark.parametrize(
    "mapping, exc, match",
    [
        ({}, ValueError, "non-empty mapping"),
        ({"planner": None}, ValueError, "must be one of"),
        ({"designer:*": None}, ValueError, "only executor roles"),
        ({"designer": "not a policy"}, TypeError, "must be a Policy"),
    ],
)
def test_bad_registry(mapping, exc, match):
    with pytest.raises(exc, match=match):
        PolicyRegistry(mapping)


def test_build_policy_backends(tiny_policy):
    scripted = build_policy("scripted", "s", replies=["a"])
    assert isinstance(scripted, ScriptedPolicy) and scripted.model_id == "s"
    hf = build_policy("hf", "tiny", max_batch_size=4)
    assert isinstance(hf, HFPolicy) and hf.max_batch_size == 4
    batched = build_policy("hf", "tiny", batching=True, max_batch_size=8, max_wait_s=0.01)
    assert isinstance(batched, BatchingPolicy) and batched.max_batch_size == 8
    assert batched.backend.max_batch_size == 8
    batched.close()
    openai = build_policy("openai", "served-name", base_url="http://127.0.0.1:1/v1", max_retries=0)
    assert openai.model_id == "served-name"
    openai.close()


def test_build_policy_serves_a_loaded_model_behind_its_own_batch_size(tiny_policy):
    """The trainer's form: a model object it trains in place, with its tokenizer, and a batcher whose batch
    size differs from the backend's (continuous batching: one request a backend call)."""
    model, tok = tiny_policy.model, tiny_policy.tokenizer
    batched = build_policy(
        "hf", model, tokenizer=tok, max_batch_size=8, continuous=True, model_id="mine", batching=True,
        batch_size=1, max_in_flight=32,
    )  # fmt: skip
    assert isinstance(batched, BatchingPolicy) and batched.max_batch_size == 1
    assert batched.backend.max_batch_size == 8 and batched.backend.model is model and batched.model_id == "mine"
    assert batched.continuous
    batched.close()
    with pytest.raises(ValueError, match=r"\['batch_size'\] only apply with batching=True"):
        build_policy("scripted", "s", replies=["a"], batch_size=2)


def test_unknown_backend_lists_valid_ones():
    with pytest.raises(
        ValueError, match=r"unknown policy backend 'tgi'.*\['hf', 'openai', 'scripted', 'vllm'\]"
    ):
        build_policy("tgi", "m")


def test_unknown_option_is_named():
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['temprature'\] for the 'hf' backend"):
        build_policy("hf", "tiny", temprature=0.5)


def test_openai_needs_base_url():
    with pytest.raises(ValueError, match="base_url"):
        build_policy("openai", "m")


def test_batching_options_need_batching():
    with pytest.raises(ValueError, match="batching=True"):
        build_policy("scripted", "s", replies=["a"], max_wait_s=0.1)


def test_build_registry_shares_identical_specs_and_separates_instances():
    spec = {"backend": "scripted", "model": "m", "replies": ["a"], "cycle": True}
    shared = build_registry({"designer": spec, "executor": dict(spec)})
    assert shared.is_shared
    separate = build_registry({"designer": {**spec, "instance": "d"}, "executor": {**spec, "instance": "e"}})
    assert len(separate.physical()) == 2 and separate.models() == {"designer": "m", "executor": "m"}
    with pytest.raises(ValueError, match="'backend' and 'model'"):
        build_registry({"designer": {"model": "m"}})


def test_routing_policy_sends_each_agent_call_to_its_model():
    from metaagent.policy import ChatRequest, PolicyRegistry, RoutingPolicy, ScriptedPolicy

    main = ScriptedPolicy(lambda r: "main", model_id="main")
    critic = ScriptedPolicy(lambda r: "critic", model_id="critic")
    router = RoutingPolicy(PolicyRegistry({"designer": main, "executor": main, "executor:*Critic*": critic}))
    msgs = [{"role": "user", "content": "x"}]
    reqs = [
        ChatRequest(msgs, agent="Solver"),
        ChatRequest(msgs, agent="MathCritic"),
        ChatRequest(msgs, role="designer"),
        ChatRequest(msgs, agent="CodeCritic"),
    ]
    assert [c.text for c in router.generate(reqs)] == ["main", "critic", "main", "critic"]
    assert critic.batch_sizes == [2] and main.batch_sizes == [2]  # one generate call per target model
    assert router.model_id == "critic+main"
