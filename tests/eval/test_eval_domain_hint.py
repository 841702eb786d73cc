"""``metaagent-eval --domain-hint`` (issue 62): the flag reaches the designer prompt of ``auto``, and ``auto``
(the default) uses the setting the designer checkpoint records in its folder."""

from __future__ import annotations

import pytest

from metaagent.cli.eval import build_parser, config_from_args
from metaagent.data import load_bundled
from metaagent.eval import Evaluation, EvalError, make_config
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.rollout.prompts import prompt_domain_hint, write_designer_prompt
from metaagent.workflow import SandboxPool

DESIGN = 'solver = Agent("MathSolver", "Solve it. Put the answer in \\\\boxed{}.")\nsubmit(solver(task))\n'


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=1) as p:
        yield p


def test_the_flag_is_parsed_into_the_config_and_its_rollout():
    args = build_parser().parse_args(["--model", "tiny", "--domain-hint", "off"])
    cfg = config_from_args(args)
    assert cfg.domain_hint == "off"
    assert Evaluation(cfg).rollout_config().domain_hint == "off"
    assert config_from_args(build_parser().parse_args(["--model", "tiny"])).domain_hint == "auto"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--model", "tiny", "--domain-hint", "maybe"])


@pytest.mark.parametrize(("flag", "want"), [("auto", False), ("on", True), ("off", False)])
def test_auto_designs_are_asked_with_the_flag_or_the_checkpoints_setting(tmp_path, pool, flag, want):
    model = tmp_path / "ckpt"
    model.mkdir()
    write_designer_prompt(model, "compact", domain_hint=False)  # the checkpoint was trained without the line
    asked: list[list[dict]] = []

    def reply(request: ChatRequest) -> str:
        if request.role == "designer":
            asked.append(request.messages)
            return f"```python\n{DESIGN}```"
        return "<delivery>\\boxed{0}</delivery>"

    task = next(t for t in load_bundled("test") if t.domain == "math")
    cfg = make_config(models=[str(model)], methods=["auto"], benchmarks=["bundled:test/math"], tasks=[task.id],
                      n=2, out=str(tmp_path / "out"), bootstrap=100, html=False, domain_hint=flag)  # fmt: skip
    Evaluation(cfg, policies={str(model): ScriptedPolicy(reply, model_id=str(model))}, pool=pool).run()
    assert len(asked) == 2 and [prompt_domain_hint(m) for m in asked] == [want, want]
    assert all(("Task domain: math." in m[1]["content"]) is want for m in asked)


def test_results_of_another_domain_hint_are_not_resumed(tmp_path, pool):
    out = tmp_path / "out"
    policy = ScriptedPolicy(lambda r: "<delivery>\\boxed{0}</delivery>", model_id="scripted")
    task = next(t for t in load_bundled("test") if t.domain == "math")
    common = dict(models=["scripted"], methods=["sa"], benchmarks=["bundled:test/math"], tasks=[task.id], n=1,
                  out=str(out), bootstrap=100, html=False)  # fmt: skip
    Evaluation(make_config(**common, domain_hint="on"), policies={"scripted": policy}, pool=pool).run()
    with pytest.raises(EvalError, match="domain_hint"):
        Evaluation(make_config(**common, domain_hint="off"), policies={"scripted": policy}, pool=pool).run()
