"""The hierarchical rollout engine: M x N trees, record round trip, log-prob fidelity, fixed MAS, failures."""

from __future__ import annotations

import re
import time

import pytest
import torch

from metaagent.data import Task
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.records import read_trees, write_trees
from metaagent.rollout.config import RolloutConfig, SamplingConfig
from metaagent.rollout.engine import RolloutEngine
from metaagent.rollout.metrics import rollout_metrics
from metaagent.seeding import derive_seed
from metaagent.workflow import SandboxPool, load_templates

TASKS = [
    Task(id="m1", domain="math", question="What is 2 + 3?", answer="5", source="test"),
    Task(id="m2", domain="math", question="What is 10 - 4?", answer="6", source="test"),
]

SINGLE = {t.name: t.source for t in load_templates()}


def fenced(script: str) -> str:
    return f"Here is the workflow.\n```python\n{script}\n```"


def agent_reply(request: ChatRequest) -> str:
    """A math agent that computes "What is a op b?" correctly and follows the delivery protocol."""
    if "CORRECT" in request.messages[0]["content"]:  # a critic: approve
        return "Checked. <delivery>CORRECT</delivery>"
    text = "\n".join(m["content"] for m in request.messages)
    a, op, b = re.search(r"What is (\d+) ([+-]) (\d+)", text).groups()
    value = int(a) + int(b) if op == "+" else int(a) - int(b)
    return f"{a} {op} {b} = {value}. <delivery>\\boxed{{{value}}}</delivery>"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=4) as p:
        p.warm()
        yield p


@pytest.fixture(scope="module")
def tiny():
    from metaagent.policy.hf import HFPolicy

    return HFPolicy("tiny", max_batch_size=16)


def _forward_logprobs(model, prompt_ids, response_ids, temperature):
    """A fresh forward pass of the trainer's model over one (prompt, response) pair."""
    from metaagent.learn.logprobs import response_logprobs
    from metaagent.learn.samples import Sample, collate

    s = Sample("executor", list(prompt_ids), list(response_ids), [0.0] * len(response_ids), 0.0, temperature)
    with torch.no_grad():
        logp, _ = response_logprobs(model, collate([s]))
    return logp[0, : len(response_ids)].tolist()


def test_tiny_model_tree_shapes_round_trip_and_logprobs(tmp_path, pool, tiny):
    """B=2, M=2, N=2 with the tiny model as designer and executor: 2 trees, 4 designs, <= 8 executions;
    JSONL round trip is exact; every generated sample's log-probs equal the trainer's forward pass."""
    cfg = RolloutConfig(
        m_designs=2,
        n_executions=2,
        k_templates=1,
        designer=SamplingConfig(temperature=1.0, max_tokens=24),
        executor=SamplingConfig(temperature=0.7, max_tokens=16, stop=["</delivery>"]),
    )
    # The random tiny model writes invalid scripts; a scripted designer supplies one valid design per task
    # so the tiny executor runs too. Designer samples of the tiny designer are checked separately below.
    engine = RolloutEngine(tiny, tiny, cfg, pool=pool, run_id="t")
    trees = engine.rollout(TASKS, step=0, seed=3)
    assert len(trees) == 2 and [len(t.designs) for t in trees] == [2, 2]
    assert sum(len(d.executions) for t in trees for d in t.designs) <= 8
    for t in trees:
        for d in t.designs:
            s = d.sample
            assert s is not None and s.templates and len(s.logprobs) == len(s.response_ids)
            ref = _forward_logprobs(tiny.model, s.prompt_ids, s.response_ids, 1.0)
            assert torch.allclose(torch.tensor(s.logprobs), torch.tensor(ref), atol=1e-4)
            if not d.valid:
                assert d.reward == 0.0 and d.executions == [] and d.check.errors

    designer = ScriptedPolicy(lambda r: fenced(SINGLE["single_math"]))
    cfg.designer = SamplingConfig(max_tokens=1024)
    engine = RolloutEngine(designer, tiny, cfg, pool=pool, run_id="t")
    trees = engine.rollout(TASKS, step=1, seed=3)
    executions = [e for t in trees for _, e in t.executions()]
    assert len(executions) == 8
    turns = [turn for e in executions for turn in e.turns]
    assert turns, "the single-agent template makes one agent call per execution"
    for turn in turns:
        ref = _forward_logprobs(tiny.model, turn.prompt_ids, turn.response_ids, 0.7)
        assert torch.allclose(torch.tensor(turn.logprobs), torch.tensor(ref), atol=1e-4)
    for e in executions:
        assert e.reward is not None and (e.reward.total is not None or e.reward.error)

    write_trees(tmp_path / "r.jsonl", trees)
    back, bad = read_trees(tmp_path / "r.jsonl")
    assert bad == [] and back == trees


def test_seeds_are_derived_and_rollouts_reproduce(pool, tiny):
    cfg = RolloutConfig(m_designs=1, n_executions=2, executor=SamplingConfig(max_tokens=12))
    designer = ScriptedPolicy(lambda r: fenced(SINGLE["single_math"]))
    engine = RolloutEngine(designer, tiny, cfg, pool=pool)
    a = engine.rollout(TASKS[:1], step=5, seed=11)[0]
    b = engine.rollout(TASKS[:1], step=5, seed=11)[0]
    c = engine.rollout(TASKS[:1], step=6, seed=11)[0]
    text = lambda t: [turn.response for _, e in t.executions() for turn in e.turns]  # noqa: E731
    assert text(a) == text(b)
    assert text(a) != text(c)
    assert [e.seed for _, e in a.executions()] == [derive_seed(11, 5, "m1", 0, 0, j, "execute") for j in range(2)]


def test_fixed_mas_runs_frozen_design_without_designer_samples(pool):
    from metaagent.learn.samples import build_samples

    cfg = RolloutConfig(m_designs=4, n_executions=3, frozen_designer="reflection")
    engine = RolloutEngine(None, ScriptedPolicy(agent_reply), cfg, pool=pool)
    trees = engine.rollout(TASKS, step=0, seed=0)
    for t in trees:
        assert t.mode == "fixed" and len(t.designs) == 1
        d = t.designs[0]
        assert d.sample is None and d.source == "frozen:template:reflection" and d.valid
        assert len(d.executions) == 3 and all(e.status == "ok" for e in d.executions)
        assert d.structure["structure"] == "reflection"
        assert {turn.role for e in d.executions for turn in e.turns} == {"AlgebraSolver", "MathCritic"}
        assert d.reward == pytest.approx(1.4)
    for t, d, e in [(0, 0, 0)]:
        trees[t].designs[d].advantage = 0.0
        trees[t].designs[d].executions[e].advantage = 1.0
    samples = build_samples(trees, active_roles={"designer", "executor"}, temperatures={"designer": 1.0, "executor": 1.0})
    assert {s.role for s in samples} == {"executor"}
    assert samples.metrics["samples/frozen_designs"] == 2


def test_frozen_design_from_file_and_bad_spec(tmp_path, pool):
    path = tmp_path / "solo.py"
    path.write_text('a = Agent("Solo", "Answer in \\\\boxed{}.")\nsubmit(a(task))\n')
    engine = RolloutEngine(None, ScriptedPolicy(agent_reply), RolloutConfig(n_executions=1, frozen_designer=str(path)), pool=pool)
    tree = engine.rollout(TASKS[:1])[0]
    assert tree.designs[0].source == f"frozen:file:{path}" and tree.designs[0].executions[0].status == "ok"
    with pytest.raises(ValueError, match="neither a script file nor a template"):
        RolloutEngine(None, ScriptedPolicy(agent_reply), RolloutConfig(frozen_designer="no-such-template"), pool=pool)


HOSTILE = {
    "good": 'a = Agent("Solver", "Answer in \\\\boxed{}.")\nsubmit(a(task))',
    "import": 'import os\na = Agent("S", "x")\nsubmit(a(task))',
    "loop": 'a = Agent("S", "x")\nwhile True:\n    pass\nsubmit(a(task))',
    "crash": 'a = Agent("S", "x")\nx = a(task)\nsubmit(1 / 0)',
    "bomb": 'a = Agent("S", "x")\nx = [0] * (10 ** 10)\nsubmit(a(task))',
    "prose": None,
}


def test_failing_and_hostile_designs_cost_only_themselves(pool):
    names = list(HOSTILE)
    cfg = RolloutConfig(m_designs=len(names), n_executions=2, limits={"timeout_s": 2.0, "memory_mb": 256})
    engine = RolloutEngine(_IndexedDesigner(names), ScriptedPolicy(agent_reply), cfg, pool=pool)
    t0 = time.perf_counter()
    tree = engine.rollout(TASKS[:1], seed=0)[0]
    elapsed = time.perf_counter() - t0
    by_kind = dict(zip(names, tree.designs))
    assert elapsed < 2 * 2.0 + 10, "the looping design ends at its limit, not later"
    assert [e.status for e in by_kind["good"].executions] == ["ok", "ok"]
    assert by_kind["good"].reward == pytest.approx(1.4)
    assert not by_kind["import"].valid and by_kind["import"].check.errors[0].code.startswith("E-")
    assert by_kind["import"].executions == [] and by_kind["import"].reward == 0.0
    assert not by_kind["prose"].valid and by_kind["prose"].reward == 0.0
    assert {e.status for e in by_kind["loop"].executions} == {"timeout"}
    assert {e.status for e in by_kind["crash"].executions} == {"error"}
    assert all(e.error.line == 3 for e in by_kind["crash"].executions)
    assert {e.status for e in by_kind["bomb"].executions} <= {"limit", "error"}
    for kind in ("loop", "crash", "bomb"):  # failed executions are still scored (a computed 0 correct)
        assert all(e.reward.total is not None for e in by_kind[kind].executions)
    m = rollout_metrics([tree])
    assert m["rollout/valid_script_rate"] == pytest.approx(4 / 6)
    assert m["rollout/exec_status/timeout"] == 2 and m["rollout/exec_status/ok"] == 2


class _IndexedDesigner(ScriptedPolicy):
    """Design i of the first task (rollout seed 0, no step) gets kind i, recognised by its request's seed: the
    engine may send the designer requests in one call or one by one, in any order."""

    def __init__(self, names):
        self.names = names
        self.kind = {derive_seed(0, None, TASKS[0].id, 0, i, "design"): i for i in range(len(names))}
        super().__init__(lambda r: "")

    def _generate(self, requests):
        out = []
        for r in requests:
            script = HOSTILE[self.names[self.kind[r.sampling.seed]]]
            reply = "I would just answer 5." if script is None else fenced(script)
            out.append(ScriptedPolicy([reply])._generate([r])[0])
        return out


def test_policy_failure_on_host_is_recorded_not_scored(pool):
    class Down(ScriptedPolicy):
        def _generate(self, requests):
            from metaagent.policy import PolicyError

            raise PolicyError("backend unreachable")

    designer = ScriptedPolicy(lambda r: fenced(HOSTILE["good"]))
    engine = RolloutEngine(designer, Down(agent_reply), RolloutConfig(m_designs=1, n_executions=2), pool=pool)
    tree = engine.rollout(TASKS[:1])[0]
    for e in tree.designs[0].executions:
        assert e.status == "error" and re.search("unreachable", e.error.message)
        assert e.reward.total is None and "not scored" in e.reward.error
    assert tree.designs[0].reward is None
    assert rollout_metrics([tree])["rollout/reward_errors"] == 2


@pytest.mark.slow
@pytest.mark.ray
def test_ray_pool_gives_the_same_executions_as_the_local_pool(pool):
    from metaagent.rollout.ray_pool import RaySandboxPool

    designer = ScriptedPolicy(lambda r: fenced(SINGLE["reflection"]), model_id="d")
    executor = ScriptedPolicy(agent_reply, model_id="e")
    cfg = RolloutConfig(m_designs=2, n_executions=2)
    local = RolloutEngine(designer, executor, cfg, pool=pool).rollout(TASKS, seed=1)
    from metaagent.rewards import RewardConfig

    with RaySandboxPool("local", workers=2, slots_per_actor=2, reward_config=RewardConfig()) as ray_pool:
        remote = RolloutEngine(designer, executor, cfg, pool=ray_pool).rollout(TASKS, seed=1)
    strip = lambda trees: [  # noqa: E731
        [(e.status, e.answer, [t.response for t in e.turns], e.reward.total) for _, e in t.executions()] for t in trees
    ]
    assert strip(remote) == strip(local)
    assert all(e.status == "ok" for t in remote for _, e in t.executions())


def test_requests_carry_team_affinity_keys(pool):
    """Designer prompts are keyed by (step, task); agent calls by (step, task, design, agent), the same for
    every execution of a design, so a multi-server backend keeps them on one server's prefix cache."""
    seen: list[ChatRequest] = []

    def reply(request: ChatRequest) -> str:
        seen.append(request)
        return fenced(SINGLE["reflection"]) if request.role == "designer" else agent_reply(request)

    cfg = RolloutConfig(m_designs=2, n_executions=2)
    RolloutEngine(ScriptedPolicy(reply), ScriptedPolicy(reply), cfg, pool=pool).rollout(TASKS, step=7, seed=0)
    designer = sorted(r.affinity for r in seen if r.role == "designer")
    assert designer == ["s7/t0", "s7/t0", "s7/t1", "s7/t1"]
    agents = {(r.affinity, r.agent) for r in seen if r.role == "executor"}
    assert {a for a, _ in agents} == {f"s7/t{t}/d{d}/{agent}" for t in (0, 1) for d in (0, 1)
                                      for agent in ("AlgebraSolver", "MathCritic")}  # fmt: skip
    assert all(a.endswith("/" + agent) for a, agent in agents)
    per_key = {a: sum(r.affinity == a for r in seen) for a, _ in agents}
    assert min(per_key.values()) >= 2  # both executions of a design share their agents' keys


def test_a_training_rollout_executes_a_design_while_others_are_still_generated(pool):
    """Design 1's generation waits until an agent call of design 0's execution arrived: only an engine that
    starts each design's executions as soon as that design is ready finishes this rollout (with a continuous
    designer policy; a static one gets all designer requests in one call)."""
    import threading

    agent_called = threading.Event()
    second = derive_seed(0, 3, TASKS[0].id, 0, 1, "design")

    class SecondWaits(ScriptedPolicy):
        continuous = True  # concurrent calls decode together: the engine sends designer requests one by one

        def _generate(self, requests):
            if any(r.sampling.seed == second for r in requests):
                assert agent_called.wait(60), "no execution started before the last design was generated"
            return [ScriptedPolicy([fenced(HOSTILE["good"])])._generate([r])[0] for r in requests]

    def executor(request):
        agent_called.set()
        return agent_reply(request)

    engine = RolloutEngine(SecondWaits(lambda r: ""), ScriptedPolicy(executor), RolloutConfig(m_designs=2, n_executions=1), pool=pool)
    tree = engine.rollout(TASKS[:1], seed=0, step=3)[0]
    assert [len(d.executions) for d in tree.designs] == [1, 1] and all(d.valid for d in tree.designs)
    assert [d.index for d in tree.designs] == [0, 1] and tree.timings["design_s"] <= tree.timings["total_s"]
