"""MAPPA's coach: a local OpenAI-compatible stub answering in the paper's format or with garbage, ground truth
only for the final action, tool observations, the rule coach, the fallback option and the per-role metrics."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from metaagent.credit import assign_credit
from metaagent.records import AgentTurn, Design, CheckReport, Execution, RewardRecord, RolloutTree, ToolCall
from metaagent.rewards.coach import (
    NOT_GIVEN,
    Coach,
    CoachConfig,
    CoachError,
    coach_items,
    coach_metrics,
    parse_process_score,
)
from metaagent.learn.samples import build_samples

GOLD = "4242"
TASK = {"id": "t0", "domain": "math", "question": "What is 4000 + 242?", "answer": GOLD}


def _turn(k: int, role: str, message: str, response: str) -> AgentTurn:
    delivery = response.split("<delivery>")[-1].split("</delivery>")[0].strip() if "<delivery>" in response else None
    return AgentTurn(
        k, role, f"You are {role}.", [{"role": "system", "content": f"You are {role}."}, {"role": "user", "content": message}],
        response, delivery, [1, 2, 3], [4, 5], [-0.5, -0.25], "stop", "m",
    )  # fmt: skip


def mathchat_execution() -> Execution:
    """Solver -> Coder (program runs) -> Coder again with the output -> Verifier, which submits."""
    program = "```python\nprint(4000 + 242)\n```"
    turns = [
        _turn(0, "ProblemSolver", "## Problem\nWhat is 4000 + 242?", "Add them. <delivery>about 4200</delivery>"),
        _turn(1, "CodeExecutor", "## Input from Problem Solver\nabout 4200", f"Let me compute. <delivery>{program}</delivery>"),
        _turn(2, "CodeExecutor", "Execution result:\n4242", "<delivery>the program printed 4242</delivery>"),
        _turn(3, "Verifier", "## Input from Code Executor\nthe program printed 4242", "<delivery>\\boxed{4242}</delivery>"),
    ]
    tools = [ToolCall(0, "run_program", {"program": program, "input": ""}, "4242\n", True, after_turn=2)]
    return Execution(0, "ok", answer="\\boxed{4242}", submitted=True, turns=turns, tool_calls=tools,
                     reward=RewardRecord(1.0, 1.0, 0.0))  # fmt: skip


class _Coach(BaseHTTPRequestHandler):
    reply = "The agent did its part.\nPROCESS_SCORE: 7\nANSWER_CORRECT: 1"
    bodies: list[dict] = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        payload = {
            "id": "x", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": type(self).reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }  # fmt: skip
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def stub():
    _Coach.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Coach)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    _Coach.reply = "The agent did its part.\nPROCESS_SCORE: 7\nANSWER_CORRECT: 1"


def _api_coach(url: str, **kw) -> Coach:
    return Coach(CoachConfig(backend="openai", base_url=url, model="gemini-test", max_retries=0, **kw))


def _prompt(body: dict) -> str:
    return body["messages"][0]["content"]


def test_an_api_coach_in_the_papers_format_scores_every_action(stub):
    coach = _api_coach(stub)
    execution = mathchat_execution()
    coach.score_execution(TASK, execution)
    assert [t.reward.total for t in execution.turns] == [pytest.approx(0.7)] * 4  # r_a = s / 10
    assert all(t.reward.source == "judge" and t.reward.components["score"] == 7.0 for t in execution.turns)
    # the coach's ANSWER_CORRECT is kept only where it was shown the ground truth (the final action)
    assert [t.reward.components.get("answer_correct") for t in execution.turns] == [None, None, None, 1.0]
    assert len(_Coach.bodies) == 4 and all(b["temperature"] == 0.0 and b["model"] == "gemini-test" for b in _Coach.bodies)
    m = coach.take_metrics()
    assert (m["judge/calls"], m["judge/errors"], m["judge/format_retries"]) == (4.0, 0.0, 0.0)
    assert coach.take_metrics()["judge/calls"] == 0.0  # counts are per call of take_metrics


def test_non_final_actions_never_see_the_ground_truth(stub):
    coach = _api_coach(stub)
    coach.score_execution(TASK, mathchat_execution())
    prompts = {_prompt(b).split("**Current agent being evaluated:**\n")[1].split("\n")[0]: [] for b in _Coach.bodies}
    for b in _Coach.bodies:
        prompts[_prompt(b).split("**Current agent being evaluated:**\n")[1].split("\n")[0]].append(_prompt(b))
    truth = "**Ground truth answer (if applicable):**\n"
    for role in ("ProblemSolver", "CodeExecutor"):
        for p in prompts[role]:
            assert f"{truth}{NOT_GIVEN}\n" in p
            assert p.split(truth)[1].split("\n")[0] == NOT_GIVEN
    (verifier,) = prompts["Verifier"]
    assert f"{truth}{GOLD}\n" in verifier


def test_the_gold_answer_appears_in_no_prompt_but_the_final_ones_even_without_an_upstream_leak():
    execution = mathchat_execution()
    for t in execution.turns:  # nobody upstream writes the gold answer: any occurrence would be the coach's leak
        t.response = t.response.replace(GOLD, "x")
        t.messages = [{**m, "content": m["content"].replace(GOLD, "x")} for m in t.messages]
    execution.tool_calls[0].result = "x"
    items = coach_items(TASK, execution)
    shown = {k: json.dumps(item) for k, item in items}
    assert [GOLD in shown[k] for k in range(4)] == [False, False, False, True]


def test_the_coder_is_shown_the_output_of_the_program_it_wrote_and_only_that():
    items = dict(coach_items(TASK, mathchat_execution()))
    assert items[1]["tool_observation"] == "run_program -> 4242\n"  # the first coder action caused the run
    assert items[2]["tool_observation"] == NOT_GIVEN  # its next action wrote no program
    assert items[0]["tool_observation"] == NOT_GIVEN
    assert items[1]["agent_role"].startswith("CodeExecutor\n")  # role and responsibilities
    assert "You are CodeExecutor." in items[1]["agent_role"]


def test_a_coach_answering_garbage_is_asked_once_more_then_the_turns_are_excluded_and_counted(stub):
    _Coach.reply = "Honestly a pretty good effort overall!"
    coach = _api_coach(stub)
    execution = mathchat_execution()
    coach.score_execution(TASK, execution)
    assert len(_Coach.bodies) == 8  # each action asked twice: once, then with the format reminder
    retry = _Coach.bodies[-1]["messages"]
    assert [m["role"] for m in retry] == ["user", "assistant", "user"] and "PROCESS_SCORE" in retry[-1]["content"]
    assert all(t.reward.total is None and "PROCESS_SCORE" in t.reward.error for t in execution.turns)
    m = coach.take_metrics()
    assert (m["judge/errors"], m["judge/parse_errors"], m["judge/format_retries"], m["judge/fallbacks"]) == (4.0, 4.0, 4.0, 0.0)
    # excluded: no advantage, no training sample
    tree = RolloutTree("run", TASK, 0, {}, {}, designs=[Design(0, "frozen:x", None, "s", CheckReport(True), executions=[execution])])
    result = assign_credit([tree], "mappa")
    assert result.metrics["credit/mappa_unscored"] == 4 and result.metrics.get("credit/mappa_actions", 0) == 0
    assert build_samples([tree], active_roles={"executor"}, temperatures={"executor": 1.0}) == []
    assert coach_metrics([tree])["judge/excluded_turns"] == 4


def test_the_authors_fallback_score_only_behind_the_option(stub):
    _Coach.reply = "no score here"
    coach = _api_coach(stub, on_failure="fallback", fallback_score=5.0)
    execution = mathchat_execution()
    coach.score_execution(TASK, execution)
    assert [t.reward.total for t in execution.turns] == [pytest.approx(0.5)] * 4
    assert all(t.reward.components["fallback"] == 1.0 for t in execution.turns)
    m = coach.take_metrics()
    assert m["judge/fallbacks"] == 4.0 and m["judge/errors"] == 4.0


def test_the_rule_coach_reads_the_prompt_and_rewards_format_and_the_right_final_answer():
    coach = Coach(CoachConfig(backend="rule", model="mappa_format"))
    execution = mathchat_execution()
    execution.turns[0].response = "about 4200"  # no delivery block
    coach.score_execution(TASK, execution)
    scores = [t.reward.components["score"] for t in execution.turns]
    assert scores == [0.0, 5.0, 5.0, 10.0]  # final: delivery 5 + boxed 3 + correct 2 (it was shown the gold)
    assert execution.turns[3].reward.components["answer_correct"] == 1.0
    wrong = mathchat_execution()
    wrong.turns[3].response = wrong.answer = "<delivery>\\boxed{7}</delivery>"
    wrong.turns[3].delivery = wrong.answer = "\\boxed{7}"
    coach.score_execution(TASK, wrong)
    assert wrong.turns[3].reward.components["score"] == 8.0
    # a non-final action with the right boxed answer gets no correctness points: it is never shown the gold
    early = mathchat_execution()
    early.turns[0].response = "<delivery>\\boxed{4242}</delivery>"
    coach.score_execution(TASK, early)
    assert early.turns[0].reward.components["score"] == 8.0


def test_per_role_metrics_coach_score_length_and_tool_success():
    coach = Coach(CoachConfig(backend="rule", model="mappa_format"))
    execution = mathchat_execution()
    execution.tool_calls.append(ToolCall(1, "run_program", {"program": "the program printed 4242"}, "ERROR (runtime_error)", True, after_turn=3))
    coach.score_execution(TASK, execution)
    tree = RolloutTree("run", TASK, 0, {}, {}, designs=[Design(0, "frozen:x", None, "s", CheckReport(True), executions=[execution])])
    m = coach_metrics([tree])
    assert m["judge/score_mean/CodeExecutor"] == 5.0 and m["judge/score_mean/Verifier"] == 10.0
    assert m["rollout/response_tokens/Verifier"] == 2.0
    assert m["rollout/tool_success_rate/CodeExecutor"] == 0.5  # one run printed, one failed
    assert "rollout/tool_success_rate/Verifier" not in m


def test_the_share_of_scores_at_most_1_shows_a_coach_that_answers_on_a_0_1_scale():
    """The paper's own example coach outputs use 0-1 where the prompt asks 0-10, which silently divides the
    rewards by 10: ``judge/score_share_le_1`` (scores <= 1 among the step's scored turns) makes it visible."""
    from metaagent.policy import ScriptedPolicy

    def metrics(replies):
        coach = Coach(CoachConfig(backend="rule", model="mappa_format"), backend=ScriptedPolicy(replies))
        execution = mathchat_execution()
        coach.score_execution(TASK, execution)
        tree = RolloutTree("run", TASK, 0, {}, {}, designs=[Design(0, "frozen:x", None, "s", CheckReport(True), executions=[execution])])
        return coach_metrics([tree])

    zero_one = metrics([f"PROCESS_SCORE: {s}" for s in ("0.8", "1", "0.9", "0.7")])
    assert zero_one["judge/score_share_le_1"] == 1.0 and zero_one["judge/score_mean"] == pytest.approx(0.85)
    mixed = metrics([f"PROCESS_SCORE: {s}" for s in ("0.8", "7", "10", "1.5")])
    assert mixed["judge/score_share_le_1"] == 0.25
    assert "judge/score_share_le_1" not in coach_metrics([])  # no scored turn: no share


@pytest.mark.parametrize("text, score", [("PROCESS_SCORE: 7", 7.0), ("**PROCESS_SCORE:** [8.5]", 8.5), ("PROCESS_SCORE: 12", 10.0),
                                         ("PROCESS_SCORE: 3\n...\nPROCESS_SCORE: 6", 6.0)])  # fmt: skip
def test_process_score_parser_takes_the_last_and_clamps(text, score):
    assert parse_process_score(text, 0, 10) == score


def test_coach_config_errors_name_the_key():
    with pytest.raises(CoachError, match="base_url"):
        CoachConfig(backend="openai")
    with pytest.raises(CoachError, match="mappa_format"):
        CoachConfig(backend="rule", model="nope")
    with pytest.raises(CoachError, match="on_failure"):
        CoachConfig(backend="rule", model="mappa_format", on_failure="zero")


def test_a_local_model_coach_that_answers_garbage_is_counted_not_scored():
    """The ``hf`` backend (a local transformers model; here the random tiny one, which never writes the format)."""
    coach = Coach(CoachConfig(backend="hf", model="tiny", max_tokens=6, max_concurrency=4))
    execution = mathchat_execution()
    try:
        coach.score_execution(TASK, execution)
    finally:
        coach.close()
    assert all(t.reward.total is None for t in execution.turns)
    m = coach.take_metrics()
    assert (m["judge/calls"], m["judge/errors"], m["judge/format_retries"]) == (4.0, 4.0, 4.0)


def test_the_mappa_estimator_needs_a_coach_in_the_config():
    from metaagent.config import ConfigError
    from metaagent.train.config import TrainConfig

    with pytest.raises(ConfigError, match="coach.backend"):
        TrainConfig.load(None, ["algo.estimator=mappa"])
    cfg = TrainConfig.load(None, ["algo.estimator=mappa", "coach.backend=rule", "coach.model=mappa_format"])
    assert cfg.coach.on_failure == "error" and cfg.coach.fallback_score == 5.0


def test_the_mathchat_template_runs_the_coders_program_and_the_coach_sees_its_output():
    """The ``mappa_mathchat`` template in the sandbox with a scripted team, the real ``run_program`` tool and the
    rule coach as the engine's turn scorer."""
    from metaagent.policy import ScriptedPolicy
    from metaagent.rollout.config import RolloutConfig
    from metaagent.rollout.engine import RolloutEngine

    def team(request) -> str:
        system, user = request.messages[0]["content"], request.messages[-1]["content"]
        if system.startswith("You are Problem Solver"):
            return "<delivery>Add 4000 and 242.</delivery>"
        if system.startswith("You are Code Executor"):
            if user.startswith("Execution result:"):
                return f"<delivery>The program printed {user.split(chr(10))[1]}</delivery>"
            return "<delivery>```python\nprint(4000 + 242)\n```</delivery>"
        return "<delivery>\\boxed{4242}</delivery>"

    coach = Coach(CoachConfig(backend="rule", model="mappa_format"))
    config = RolloutConfig(m_designs=1, n_executions=1, frozen_designer="mappa_mathchat", sandbox_workers=1)
    engine = RolloutEngine(None, ScriptedPolicy(team), config, turn_scorer=coach.score_execution)
    try:
        (tree,) = engine.rollout([TASK], seed=0)
    finally:
        engine.close()
    (execution,) = tree.designs[0].executions
    assert [t.role for t in execution.turns] == ["ProblemSolver", "CodeExecutor", "CodeExecutor", "Verifier"]
    assert execution.turns[2].messages[-1]["content"] == "Execution result:\n4242\n"  # the observation is the next prompt
    assert [c.name for c in execution.tool_calls] == ["run_program"]
    assert dict(coach_items(TASK, execution))[1]["tool_observation"] == "run_program -> 4242\n"
    assert [t.reward.components["score"] for t in execution.turns] == [5.0, 5.0, 5.0, 10.0]
    assert tree.timings["judge_s"] >= 0 and coach_metrics([tree])["rollout/tool_success_rate/CodeExecutor"] == 1.0
