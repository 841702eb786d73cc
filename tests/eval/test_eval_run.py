"""The harness end to end with a scripted model (fast): sa, fixed:, auto on bundled tasks; table.md,
results.json, replay opening a task; resume after a partial run; determinism; App. C split; bad input."""

from __future__ import annotations

import json
import re

import pytest

from metaagent.data import code_references, load_bundled
from metaagent.eval import EvalError, Evaluation, make_config, paired_comparison, score_task
from metaagent.eval.runner import probe_endpoint
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.records import CheckReport, Design, Execution, RewardRecord, RolloutTree
from metaagent.workflow import SandboxPool

MATH = [t for t in load_bundled("test") if t.domain == "math"][:2]
CODE = [t for t in load_bundled("test") if t.domain == "code"][:2]
REFS = code_references()
SOLVED = {MATH[0].question: MATH[0].answer}  # the scripted agent knows one math answer, not the other

DESIGN = 'solver = Agent("MathSolver", "Solve it. Put the answer in \\\\boxed{}.")\nsubmit(solver(task))\n'


def reply(request: ChatRequest) -> str:
    """Designer: a one-agent script. Agents: the known answer (or 0), the reference program for code."""
    if request.role == "designer":
        return f"```python\n{DESIGN}```"
    text = "\n".join(m["content"] for m in request.messages)
    for task in CODE:
        if task.question[:60] in text:
            return f"<delivery>```python\n{REFS[task.id]}\n```</delivery>"
    for question, answer in SOLVED.items():
        if question in text:
            return f"<delivery>\\boxed{{{answer}}}</delivery>"
    return "<delivery>\\boxed{0}</delivery>"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


def _config(out, **kw):
    values = {
        "models": ["scripted"],
        "methods": ["sa", "fixed:single_math", "auto"],
        "benchmarks": ["bundled:test/math", "bundled:test/code"],
        "limit": 2,
        "n": 2,
        "k": [1, 2],
        "out": str(out),
        "bootstrap": 200,
        "concurrency": 2,
        "html_tasks": 5,
    }
    values.update(kw)
    return make_config(**values)


def _run(out, pool, **kw):
    policy = ScriptedPolicy(reply, model_id="scripted")
    results = Evaluation(_config(out, **kw), policies={"scripted": policy}, pool=pool).run()
    return results, policy


def _entry(results, bench, method, cell="scripted"):
    return results["cells"][cell]["benchmarks"][bench][method]


def test_end_to_end_tables_json_replay_and_resume(tmp_path, pool):
    out = tmp_path / "res"
    results, policy = _run(out, pool, limit=1)
    first_calls = len(policy.calls)
    assert results["complete"] and first_calls > 0

    results, policy = _run(out, pool)  # resume with a larger limit: only the new tasks run
    math = _entry(results, "bundled:test/math", "sa")
    assert math["tasks"] == 2 and math["complete"]
    # one of the two math tasks is always solved, the other never: avg@2 = pass@2 = maj@2 = 0.5
    for metric in ("avg@1", "avg@2", "pass@1", "pass@2", "maj@2"):
        assert math["metrics"][metric]["mean"] == pytest.approx(0.5), metric
    assert math["metrics"]["avg@2"]["ci95"][0] <= 0.5 <= math["metrics"]["avg@2"]["ci95"][1]
    code = _entry(results, "bundled:test/code", "fixed:single_math")  # runs its code twin on code tasks
    assert code["metrics"]["pass@1"]["mean"] == 1.0 and "maj@2" not in code["metrics"]
    auto = _entry(results, "bundled:test/math", "auto")
    assert auto["valid_script_rate"] == 1.0 and auto["exec_status"]["ok"] == 4 and auto["reward_errors"] == 0
    assert auto["designs"]["structure_share"]["family"] == {"single": 1.0}
    assert auto["designs"]["roles"]["top"] == [["MathSolver", 4]]
    assert auto["budget"]["agent_calls_per_task"] == 2.0
    # the resumed run re-ran only task 2 of each (benchmark, method): fewer calls than a fresh run
    assert 0 < len(policy.calls) < 2 * first_calls + 1

    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["n"] == 2 and saved["ks"] == [1, 2] and "metaagent" in saved["versions"]
    from metaagent.execution import isolation

    assert json.loads((out / "run.json").read_text())["isolation"]["layer"] == isolation.active().layer
    assert saved["seeds"]["seed"] == 0
    table = (out / "table.md").read_text()
    assert "| Model | Method | bundled:test/math | bundled:test/code | Avg |" in table
    assert "| scripted | bundled:test/math | 4 | 100.0 | 0.0 | 0.0 | 0.0 | 1 | MathSolver | 0.0 |" in table
    row = next(line for line in table.splitlines() if line.startswith("| scripted | auto |"))
    assert "50.00 (+0.00)" in row and "100.00 (+0.00)" in row
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "<script" not in html

    from metaagent.replay import load_run

    run = load_run(out)
    refs = run.select(MATH[1].id)
    assert {r.kind for r in refs} == {"eval"} and len(refs) == 3  # sa, fixed and auto trees of the task
    assert not run.bad_lines


def test_deterministic_under_a_seed_and_killed_run_resumes(tmp_path, pool):
    a, _ = _run(tmp_path / "a", pool, methods=["auto"], benchmarks=["bundled:test/math"])
    b, _ = _run(tmp_path / "b", pool, methods=["auto"], benchmarks=["bundled:test/math"])
    strip = lambda r: json.dumps(r["cells"]["scripted"]["benchmarks"], sort_keys=True)
    assert re.sub(r'"records": "[^"]*"', "", strip(a)) == re.sub(r'"records": "[^"]*"', "", strip(b))
    # a killed run leaves a cut last line: it is skipped and its task re-run
    path = next((tmp_path / "a").rglob("auto.jsonl"))
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    c, policy = _run(tmp_path / "a", pool, methods=["auto"], benchmarks=["bundled:test/math"])
    assert len(policy.calls) == 2 + 2  # one task again: 2 designs + 2 agent calls
    assert strip(c) == strip(a)
    d, policy = _run(tmp_path / "a", pool, methods=["auto"], benchmarks=["bundled:test/math"])
    assert len(policy.calls) == 0 and strip(d) == strip(a)  # the re-run tree was kept on its own line
    assert len(path.read_text().splitlines()) == 2


def test_other_settings_in_the_same_dir_are_refused(tmp_path, pool):
    _run(tmp_path, pool, methods=["sa"], benchmarks=["bundled:test/math"], limit=1)
    with pytest.raises(EvalError, match="other settings.*seed"):
        _run(tmp_path, pool, methods=["sa"], benchmarks=["bundled:test/math"], limit=1, seed=5)


def test_a_changed_adapter_is_not_resumed(tmp_path, pool):
    """Results of an adapter (embedded-sft, a LoRA folder) carry its hash; new weights under the same name are
    refused on resume instead of mixing two models' tasks in one table."""
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"base_model_name_or_path": "embedded", "r": 16}')
    (adapter / "adapter_model.safetensors").write_bytes(b"weights v1")

    def run():
        cfg = _config(tmp_path / "res", models=[str(adapter)], methods=["sa"], benchmarks=["bundled:test/math"], limit=1)
        return Evaluation(cfg, policies={str(adapter): ScriptedPolicy(reply, model_id="a")}, pool=pool).run()

    run()
    revision = json.loads((tmp_path / "res" / "run.json").read_text())["model_revisions"][str(adapter)]
    assert re.fullmatch(r"[0-9a-f]{12}", revision)
    run()  # same weights: resumed
    record = json.loads(next((tmp_path / "res").rglob("sa.jsonl")).read_text().splitlines()[0])
    assert record["config"]["eval"]["revisions"] == {"designer": revision, "executor": revision}  # the record names it too
    # a run of another model in the same directory keeps the adapter's revision for later resumes
    cfg = _config(tmp_path / "res", methods=["sa"], benchmarks=["bundled:test/math"], limit=1)
    Evaluation(cfg, policies={"scripted": ScriptedPolicy(reply, model_id="scripted")}, pool=pool).run()
    assert json.loads((tmp_path / "res" / "run.json").read_text())["model_revisions"] == {str(adapter): revision}
    (adapter / "adapter_model.safetensors").write_bytes(b"weights v2")
    with pytest.raises(EvalError, match=f"at revision {revision}, but it is now [0-9a-f]{{12}} .*--fresh"):
        run()
    for path in (tmp_path / "res").rglob("*.jsonl"):  # no records of the adapter left: nothing to mix
        path.unlink()
    run()


def test_bad_input_lists_the_valid_choices(tmp_path, pool):
    with pytest.raises(EvalError, match="valid methods: sa, auto, fixed:.*fixed:debate"):
        _run(tmp_path, pool, methods=["magic"])
    with pytest.raises(EvalError, match="valid templates: .*single_math"):
        _run(tmp_path, pool, methods=["fixed:nope"])
    with pytest.raises(EvalError, match="valid benchmarks: .*humaneval"):
        _run(tmp_path, pool, benchmarks=["mmlu"])
    with pytest.raises(EvalError, match="k=3 > n=2"):
        _config(tmp_path, k=[3])
    with pytest.raises(EvalError, match="aime24 is not shipped .*aime24@"):
        _run(tmp_path, pool, benchmarks=["aime24"])  # the tests run offline


def test_unreachable_endpoint_fails_before_any_work(tmp_path):
    with pytest.raises(EvalError, match="unreachable"):
        probe_endpoint("http://127.0.0.1:9/v1", timeout_s=2)
    with pytest.raises(EvalError, match="unreachable"):
        Evaluation(_config(tmp_path, backend="openai", base_url="http://127.0.0.1:9/v1"))
    assert not (tmp_path / "rollouts").exists()


def _tree(task_id: str, outcomes, pattern: str) -> RolloutTree:
    """A tree with one valid design per outcome (1 correct, 0 wrong, None unscored, "x" invalid design)."""
    designs = []
    for i, o in enumerate(outcomes):
        if o == "x":
            designs.append(Design(i, "designer", None, None, CheckReport(ok=False)))
            continue
        r = RewardRecord(None, None, None, error="boom") if o is None else RewardRecord(float(o), float(o), 0.0)
        e = Execution(0, "ok", answer=str(o), reward=r)
        structure = {"pattern": pattern, "family": "single"}
        designs.append(Design(i, "designer", None, "x", CheckReport(ok=True), structure, [e]))
    return RolloutTree("r", {"id": task_id, "domain": "code"}, 0, {}, {}, designs)


def test_task_score_counts_unscored_samples_as_errors_not_zeros():
    s = score_task(_tree("t", [1, None, "x"], "single"), [1, 2, 3])
    assert (s.n, s.c, s.samples, s.reward_errors) == (2, 1, 3, 1)
    assert s.avg[2] == 0.5 and s.pass_[1] == 0.5 and s.pass_[2] == 1.0
    assert s.avg[3] is None and s.pass_[3] is None  # only 2 scored samples: no @3 metric
    assert s.statuses == {"ok": 2, "invalid_design": 1}


def test_task_score_round_trips_through_results_json():
    s = score_task(_tree("t", [1, None, 0], "single"), [1, 2, 3])
    back = type(s).from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s and back.pass_[3] == s.pass_[3] and 3 in back.avg


def test_paired_comparison_splits_only_b_by_structure():
    a = [score_task(_tree(f"t{i}", [0, 0], "single"), [2]) for i in range(4)]
    b = [
        score_task(_tree("t0", [1, 1], "single"), [2]),  # same structure: executor gain
        score_task(_tree("t1", [1, 1], "reflection"), [2]),  # designer flip
        score_task(_tree("t2", [1, 0], "reflection"), [2]),  # 0.5 >= threshold: solved, flip
        score_task(_tree("t3", [0, 0], "single"), [2]),
    ]
    cmp = paired_comparison(a, b, k=2, n_boot=200)
    assert cmp["tasks"] == 4 and cmp["diff"] == pytest.approx(2.5 / 4)
    assert cmp["only_b"] == 3 and cmp["only_b_same_structure"] == 1 and cmp["only_b_different_structure"] == 2
    assert cmp["only_a"] == 0 and cmp["neither"] == 1
    assert cmp["ci95"][0] <= cmp["diff"] <= cmp["ci95"][1]


def test_co_evolution_grid_crosses_designers_and_executors(tmp_path, pool):
    """Designer x executor checkpoints: 4 cells; the executor decides here (only one of them can solve)."""

    def weak(request: ChatRequest) -> str:
        return f"```python\n{DESIGN}```" if request.role == "designer" else "<delivery>\\boxed{0}</delivery>"

    policies = {"sft": ScriptedPolicy(weak, model_id="sft"), "rl": ScriptedPolicy(reply, model_id="rl")}
    cfg = _config(
        tmp_path, models=["x"], grid_designers=["sft", "rl"], grid_executors=["sft", "rl"],
        methods=["auto"], benchmarks=["bundled:test/math"], limit=1, html=False,
    )  # fmt: skip
    results = Evaluation(cfg, policies=policies, pool=pool).run()
    assert list(results["cells"]) == ["sft", "sft -> rl", "rl -> sft", "rl"]
    assert results["grid"]["benchmarks"]["bundled:test/math"] == [[0.0, 1.0], [0.0, 1.0]]
    table = (tmp_path / "table.md").read_text()
    assert "## Co-evolution grid" in table and "| sft | 0.00 | 100.00 |" in table
    cmp = next(c for c in results["comparisons"] if c["a"][0] == "sft" and c["b"][0] == "rl")
    assert cmp["only_b"] == 1 and cmp["only_b_same_structure"] == 1  # the same design: an executor gain


def test_checkpoint_folders_resolve_to_the_role_model(tmp_path):
    from metaagent.learn.checkpoint import checkpoint_model

    ckpt = tmp_path / "run" / "checkpoints" / "step_00000030"
    (ckpt / "models" / "designer").mkdir(parents=True)
    (ckpt / "meta.json").write_text(json.dumps({"models": {"designer": "models/designer", "executor": "models/executor"}}))
    assert checkpoint_model(str(tmp_path / "run"), "designer") == str(ckpt / "models/designer")
    assert checkpoint_model(str(ckpt), "executor") == str(ckpt / "models/executor")
    assert checkpoint_model(str(ckpt) + "#designer", "executor") == str(ckpt / "models/designer")
    assert checkpoint_model("embedded", "designer") == "embedded"


def test_benchmark_specs_split_domain_limit_and_task_ids():
    from metaagent.eval.benchmarks import benchmark_tasks, parse_benchmark

    code = parse_benchmark("bundled:test/code")
    assert code.label == "bundled:test/code"
    assert {t.domain for t in benchmark_tasks(code)} == {"code"} and len(benchmark_tasks(code)) == 7
    val = parse_benchmark("bundled", split="val")
    assert val.label == "bundled:val" and {t.split for t in benchmark_tasks(val, limit=3)} == {"val"}
    he = parse_benchmark("humaneval")
    assert [t.id for t in benchmark_tasks(he, task_ids=["HumanEval/3", "HumanEval/1"])] == ["HumanEval/1", "HumanEval/3"]
    assert len(benchmark_tasks(he, limit=4)) == 4
    with pytest.raises(EvalError, match="does not exist"):
        parse_benchmark("aime24@/nonexistent.jsonl")


def test_openai_compatible_endpoint_as_the_model(tmp_path, pool):
    """A served model (an OpenAI-compatible stub answering every chat with the first task's answer)."""
    from builders import StubServer, chat_completion

    def route(method, path, body):
        if method == "GET":
            return 200, {"object": "list", "data": [{"id": "served", "object": "model"}]}, {}
        return 200, chat_completion(body["model"], f"<delivery>\\boxed{{{MATH[0].answer}}}</delivery>", prompt_tokens=10), {}

    with StubServer(route) as server:
        cfg = _config(
            tmp_path, backend="openai", base_url=server.base_url, models=["served"], methods=["sa"],
            benchmarks=["bundled:test/math"], html=False,
        )  # fmt: skip
        results = Evaluation(cfg, pool=pool).run()
    entry = _entry(results, "bundled:test/math", "sa", cell="served")
    assert entry["tasks"] == 2 and entry["reward_errors"] == 0
    assert entry["metrics"]["avg@2"]["mean"] == 0.5  # right on the first task only


def test_record_folders_of_long_checkpoint_paths_fit_the_file_system(tmp_path):
    """A checkpoint path as designer and executor (auto) would make a folder name over 255 bytes; a long name
    keeps its tail and a hash of the whole, so two checkpoints of one run still get different folders."""
    from metaagent.eval.methods import parse_method
    from metaagent.eval.runner import MAX_NAME_PART, record_path

    ckpt = "/tmp/" + "deep_folder_name/" * 12 + "checkpoints/step_{:08d}/models/policy"
    paths = [record_path(tmp_path, parse_method("auto", []), ckpt.format(s), ckpt.format(s), "suite_arith:test") for s in (1, 2)]
    for path in paths:
        assert all(len(part) <= 2 * MAX_NAME_PART + 8 for part in path.relative_to(tmp_path).parts)
        path.parent.mkdir(parents=True)  # would raise OSError (File name too long) before
        assert "step_0000000" in path.parent.parent.name
    assert paths[0] != paths[1]
    short = record_path(tmp_path, parse_method("sa", []), "embedded-sft-suite", "embedded-sft-suite", "suite_arith:test")
    assert short.parent.parent.name == "e=embedded-sft-suite"  # short names are unchanged (records resume)
