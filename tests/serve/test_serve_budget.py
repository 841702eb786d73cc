"""``metaagent-serve --budget LOW|HIGH``: every team's designer prompt carries the tag, and under LOW each
execution is capped at ``--low-max-calls`` agent calls (cut there: status ``limit``). Scripted policies."""

from __future__ import annotations

from metaagent.rollout.budget import BUDGET_LINES


def _designer_prompts(seen):
    from serve_helpers import default_designer

    def designer(request):
        seen.append(request.messages[-1]["content"])
        return default_designer(request)

    return designer


def test_low_budget_tags_the_prompt_and_cuts_the_team(make_server, client_for):
    seen: list[str] = []
    server = make_server(_designer_prompts(seen), budget="LOW")
    team = client_for(server).post("/v1/teams", json={"task": "What is 2 + 3?", "seed": 7, "return_trace": True}).json()
    assert BUDGET_LINES["LOW"] in seen[0]
    (execution,) = team["designs"][0]["executions"]
    assert execution["status"] == "limit" and len(execution["turns"]) == 1  # the checker's call passes the cap
    assert team["status"] == "no_answer" and team["trace"]["budget"] == "LOW"


def test_high_budget_and_a_raised_cap_keep_the_team_whole(make_server, client_for):
    seen: list[str] = []
    for options in ({"budget": "HIGH"}, {"budget": "LOW", "low_max_calls": 2}):
        server = make_server(_designer_prompts(seen), **options)
        team = client_for(server).post("/v1/teams", json={"task": "What is 2 + 3?", "seed": 7}).json()
        assert BUDGET_LINES[options["budget"]] in seen[-1]
        assert team["status"] == "answered" and len(team["designs"][0]["executions"][0]["turns"]) == 2


def test_the_flags_reach_the_config():
    from metaagent.cli.serve import build_parser, config_from_args

    cfg = config_from_args(build_parser().parse_args(["--model", "tiny", "--budget", "LOW", "--low-max-calls", "2"]))
    assert cfg.budget == "LOW" and cfg.low_max_calls == 2
