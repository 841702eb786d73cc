"""The task rewards registered in one process, packed for another that scores executions (a Ray sandbox actor,
maybe on another machine): a closure travels by value, a reward ``.py`` file as its source (imported under the
sender's module name, so its functions unpickle there and in that process's reward helper), what cannot be
packed or unpacked is one line naming it; and a Ray actor scores with the driver's rewards, not the domain's
scorer."""

from __future__ import annotations

import sys
import tempfile
import threading

import pytest

import metaagent.domain as domain_registry
from metaagent.domain import register_reward, use_rewards
from metaagent.lazy import import_file
from metaagent.records import AgentTurn, Execution
from metaagent.rewards import RewardConfig, RewardError, score_execution
from metaagent.rewards.task_reward import _copies, load_rewards, reward_bundle

TASK = {"id": "t", "domain": "math", "question": "What is 2 + 3?", "answer": "5"}


@pytest.fixture
def rewards():
    """The reward registry, emptied for the test and restored after it (registrations are process-wide)."""
    saved = dict(domain_registry.REWARDS._table)
    domain_registry.REWARDS._table.clear()
    yield domain_registry.REWARDS
    domain_registry.REWARDS._table.clear()
    domain_registry.REWARDS._table.update(saved)


def _execution(answer: str) -> Execution:
    response = f"<delivery>{answer}</delivery>"
    turn = AgentTurn(index=0, role="Solver", system_prompt="", messages=[], response=response,
                     delivery=answer, prompt_ids=[], response_ids=[], logprobs=None, finish_reason="stop",
                     model="m")  # fmt: skip
    return Execution(index=0, status="ok", answer=answer, submitted=True, turns=[turn])


def test_no_registered_reward_packs_nothing(rewards):
    assert reward_bundle() is None


def test_a_closure_travels_by_value_and_replaces_the_domains_scorer_where_it_is_unpacked(rewards):
    share = 0.25
    register_reward("math", lambda task, answer: share if "5" in answer else 0.0)
    bundle = reward_bundle()
    assert set(bundle["rewards"]) == {"math"} and bundle["key"] == reward_bundle()["key"]
    loaded = load_rewards(bundle)
    rewards._table.clear()  # the receiving process: nothing registered there
    record = score_execution(TASK, _execution("\\boxed{5}"), rewards=loaded)
    assert record.correct == 0.25 and record.details["task_reward"]["status"] == "ok"
    assert score_execution(TASK, _execution("\\boxed{5}")).correct == 1.0  # without them: the math scorer


def test_a_reward_file_travels_as_its_source_to_where_the_file_is_missing(
    tmp_path, rewards, monkeypatch, request
):
    (tmp_path / "my_rewards.py").write_text("def third(task, answer):\n    return 1 / 3\n")
    monkeypatch.chdir(tmp_path)
    use_rewards({"math": "my_rewards.py:third"})
    bundle = reward_bundle()
    (name, file), = bundle["files"].items()
    assert file["path"] == str(tmp_path / "my_rewards.py") and "1 / 3" in file["source"]
    # another machine: the file is not at that path and the module was never imported
    file["path"] = str(tmp_path / "elsewhere" / "my_rewards.py")
    monkeypatch.delitem(sys.modules, name)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    _copies.cache_clear()  # this process's copies folder made anew, under tmp_path (and again after the test)
    request.addfinalizer(_copies.cache_clear)
    rewards._table.clear()
    loaded = load_rewards(bundle)
    copy = sys.modules[name].__file__
    assert copy.startswith(str(tmp_path / "tmp" / "metaagent-rewards-")) and copy.endswith("my_rewards.py")
    assert loaded["math"].__module__ == name
    # the reward helper of this process imports the copy under the same name
    record = score_execution(TASK, _execution("\\boxed{5}"), rewards=loaded)
    assert record.correct == pytest.approx(1 / 3), record.error


def test_what_cannot_be_packed_or_unpacked_is_one_line_naming_it(tmp_path, rewards):
    lock = threading.Lock()
    register_reward("math", lambda task, answer: float(lock.locked()))
    with pytest.raises(RewardError, match=r"reward .*<lambda> of math cannot be sent.*at module level"):
        reward_bundle()
    rewards._table.clear()
    (tmp_path / "only_here.py").write_text("def exact(task, answer):\n    return 1.0\n")
    module = import_file(tmp_path / "only_here.py", "only_here")  # importable nowhere by its name
    register_reward("math", module.exact)
    bundle = reward_bundle()
    del sys.modules["only_here"]  # a process that never imported it
    with pytest.raises(RewardError, match=r"of math.*cannot be loaded.*ModuleNotFoundError.*every node"):
        load_rewards(bundle)


@pytest.mark.slow
@pytest.mark.ray
def test_a_ray_actor_scores_with_the_rewards_registered_in_the_driver(rewards):
    from metaagent.policy import ScriptedPolicy
    from metaagent.rollout.ray_pool import RaySandboxPool

    register_reward("math", lambda task, answer: 0.25 if "5" in answer else 0.0)
    script = 'solver = Agent("Solver", "Solve it.")\nsubmit(solver(task))\n'
    executor = ScriptedPolicy(["<delivery>\\boxed{5}</delivery>"], cycle=True, model_id="e")
    with RaySandboxPool("local", workers=1, slots_per_actor=1, reward_config=RewardConfig()) as pool:
        execution = pool.run(script, TASK, executor)
    assert execution.status == "ok", execution.error
    assert execution.reward.correct == 0.25 and execution.reward.details["task_reward"]["status"] == "ok"


def test_only_the_files_of_the_registered_rewards_travel(tmp_path, rewards, monkeypatch):
    """A reward file an earlier run of this process imported (its module still in ``sys.modules``, its file
    still there) is not packed once no registered reward comes from it."""
    (tmp_path / "old_rewards.py").write_text("def half(task, answer):\n    return 0.5\n")
    (tmp_path / "new_rewards.py").write_text("def third(task, answer):\n    return 1 / 3\n")
    monkeypatch.chdir(tmp_path)
    use_rewards({"math": "old_rewards.py:half"})
    rewards._table.clear()
    use_rewards({"math": "new_rewards.py:third"})
    files = reward_bundle()["files"]
    assert [f["path"] for f in files.values()] == [str(tmp_path / "new_rewards.py")]
