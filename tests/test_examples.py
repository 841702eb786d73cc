"""Every recipe of ``examples/`` runs at its smallest size (the random ``tiny`` model, one or two steps, a few
tokens per reply) through its real commands, and leaves what the recipe promises: metrics with the recipe's
keys, checkpoints, records, the evaluation table, the server's replies.

Each recipe runs as a user runs it: ``bash examples/NN_*.sh`` (or ``python examples/09_*.py``) with the
virtual environment's ``bin/`` first on ``PATH`` and its size knobs set in the environment.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from metaagent.learn.metrics import read_metrics
from metaagent.records import read_trees

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run_example(name: str, out: Path, *args: str, timeout: int = 600, **knobs: str) -> str:
    """Run ``examples/<name>`` with OUT=out and the knobs as environment variables; return its output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(out), **knobs}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    command = ["bash" if name.endswith(".sh") else sys.executable, str(EXAMPLES / name)]
    proc = subprocess.run(
        [*command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{name} failed ({proc.returncode}):\n{output[-4000:]}"
    assert "Traceback" not in output, output[-4000:]
    return output


def metrics(run: Path) -> list[dict]:
    rows, bad = read_metrics(run / "metrics.jsonl")
    assert rows and not bad
    return rows


def trees(run: Path, step: int = 0):
    found, bad = read_trees(run / "rollouts" / f"step_{step:06d}.jsonl")
    assert found and not bad
    return found


def last_checkpoint(run: Path) -> Path:
    checkpoints = sorted((run / "checkpoints").glob("step_*"))
    assert checkpoints, f"no checkpoint in {run}"
    return checkpoints[-1]


def test_the_readme_has_one_row_per_example_and_every_example_is_named_once():
    files = sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".sh", ".py"))
    assert len(files) == 9
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \d \| .*\[`([\w.]+)`\]\(\1\)", readme, flags=re.M)
    assert rows == files
    for name in files:
        text = (EXAMPLES / name).read_text(encoding="utf-8")
        assert f"examples/{name}" in text, f"{name}: its header shows no command that runs it"
    assert "examples/README.md" in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_01_cold_start_then_rl(tmp_path):
    run_example(
        "01_cold_start_rl.sh", tmp_path, "rollout.designer.max_tokens=32", "rollout.executor.max_tokens=16",
        MODEL="tiny", SFT_STEPS="41", RL_STEPS="1", BATCH="2",
    )  # fmt: skip
    sft, rl = tmp_path / "sft", tmp_path / "rl"
    sft_rows = [r for r in metrics(sft) if r["step"] >= 0]
    # the promised SFT steps, past one epoch of the sample (39 steps of 4): the epochs are not the limit
    assert len(sft_rows) == 41 and all(r["sft/loss"] > 0 for r in sft_rows)
    assert (sft / "model" / "config.json").is_file()
    # RL starts from the cold start's merged model, for both roles
    run = json.loads((rl / "run.json").read_text())
    assert run["models"] == {"designer": str(sft / "model"), "executor": str(sft / "model")}
    (row,) = metrics(rl)
    assert row["schedule/active"] == "executor"  # stagewise: the executor stage comes first
    # (the random model's designs are rarely valid scripts, so this step may train nothing; it ran and saved)
    assert {"rollout/reward/designer", "rollout/reward/executor", "train/samples"} <= row.keys()
    assert row["rollout/designs"] == 4  # 2 tasks x M = 2 designs
    assert len(trees(rl)) == 2 and all(len(t.designs) == 2 for t in trees(rl))  # batch 2, M = 2
    assert (last_checkpoint(rl) / "models" / "policy" / "model.safetensors").is_file()


@pytest.mark.slow
def test_02_a_fixed_team_as_frozen_designer(tmp_path):
    output = run_example(
        "02_frozen_designer.sh", tmp_path, "rollout.executor.max_tokens=16",
        MODEL="tiny", STEPS="1", BATCH="2",
    )  # fmt: skip
    (row,) = metrics(tmp_path)
    assert row["samples/designer"] == 0 and row["samples/executor"] > 0  # only the agents are trained
    designs = [d for t in trees(tmp_path) for d in t.designs]
    assert designs and {d.source for d in designs} == {"frozen:template:reflection"}
    roles = {turn.role for d in designs for e in d.executions for turn in e.turns}
    assert roles == {"AlgebraSolver", "MathCritic"}  # the template's two agents, on every task
    assert "reflection" in output  # the replay's structure table names the team


@pytest.mark.slow
def test_03_at_grpo_on_planpath_then_eval(tmp_path):
    run_example(
        "03_at_grpo_planpath.sh", tmp_path, "data.batch_size=1",
        MODEL="tiny", STEPS="1", K="2", MAX_TOKENS="8", EVAL_LIMIT="1",
    )  # fmt: skip
    (row,) = metrics(tmp_path / "train")
    groups = row["credit/at_grpo/groups"]
    assert groups >= 1 and row["credit/at_grpo/candidates"] == 2 * groups  # K = 2 candidates per group
    (tree,) = trees(tmp_path / "train")
    assert tree.task["domain"] == "plan"
    assert all(len(g.candidates) == 2 for _, e in tree.executions() for g in e.groups)
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    (cell,) = results["cells"].values()
    methods = cell["benchmarks"]["planpath:test"]
    assert set(methods) == {"fixed:single_plan", "fixed:at_plan_t2"}
    assert all(m["tasks"] == 1 for m in methods.values())
    assert "fixed:at_plan_t2" in (tmp_path / "eval" / "table.md").read_text()


@pytest.mark.slow
def test_04_mappa_with_the_rule_coach(tmp_path):
    # the tiny model's replies all end at the token limit: train them anyway (MAPPA skips truncated actions)
    run_example(
        "04_mappa_rule_coach.sh", tmp_path,
        "rollout.executor.max_tokens=16", "algo.options.mask_truncated=false",
        MODEL="tiny", STEPS="1", BATCH="2", N="2",
    )  # fmt: skip
    (row,) = metrics(tmp_path)
    actions = [turn.role for t in trees(tmp_path) for _, e in t.executions() for turn in e.turns]
    assert set(actions) == {"ProblemSolver", "CodeExecutor", "Verifier"}  # the MathChat team ran
    # the coach scored every action, and every scored action is a sample of the update
    assert row["judge/calls"] == len(actions) == row["samples/executor"] and row["judge/errors"] == 0
    assert 0 <= row["judge/score_mean"] <= 10
    assert {f"judge/score_mean/{role}" for role in actions} <= set(row)


@pytest.mark.slow
def test_05_unitymas_o_with_gae(tmp_path):
    run_example(
        "05_unitymas_gae.sh", tmp_path, "rollout.executor.max_tokens=16", MODEL="tiny", STEPS="1", N="2"
    )
    (row,) = metrics(tmp_path)
    # the critic saw every invocation the actor trained on, and every role of the loop got turn rewards
    assert row["train/critic/samples"] == row["samples/executor"] > 0 and row["train/critic/vf_loss"] > 0
    assert {"credit/values_mean", "rollout/rounds_used"} <= set(row)
    assert {f"reward/turn/{role}" for role in ("Planner", "Coder", "Reflector")} <= set(row)
    checkpoint = last_checkpoint(tmp_path)
    assert list((checkpoint / "critics").iterdir()) and list((checkpoint / "optim").glob("critic-*.pt"))


@pytest.mark.slow
def test_06_evaluation_aligned_credit(tmp_path):
    output = run_example(
        "06_eval_aligned_credit.sh", tmp_path, "rollout.executor.max_tokens=16",
        MODEL="tiny", STEPS="1", BATCH="2", N="2", PREFIX_JUDGE="rule:gold",
    )  # fmt: skip
    (row,) = metrics(tmp_path)
    recorded = [e for t in trees(tmp_path) for _, e in t.executions()]
    # every execution took the success route (Shapley) or the failure route (first error, DPO pair)
    routes = row["credit/eval_aligned/success_episodes"] + row["credit/eval_aligned/failure_episodes"]
    assert routes == len(recorded) == row["rollout/executions"] > 0
    failed = [e for e in recorded if e.first_error is not None]
    assert len(failed) == row["credit/eval_aligned/first_errors"]
    assert row["train/dpo_pairs"] == row["credit/eval_aligned/pairs"]  # the pairs reached the update
    task = trees(tmp_path)[0].task["id"]
    assert f"task {task}" in output  # the replay of one task's credit, turn by turn


@pytest.mark.slow
def test_07_a_lora_adapter_per_role_then_export(tmp_path):
    run_example(
        "07_lora_per_role.sh", tmp_path, "rollout.designer.max_tokens=32", "rollout.executor.max_tokens=16",
        MODEL="tiny", STEPS="2", STAGE_LEN="1", RANK="4", BATCH="2",
    )  # fmt: skip
    rows = metrics(tmp_path / "train")
    assert [r["schedule/active"] for r in rows] == ["executor", "designer"]
    models = last_checkpoint(tmp_path / "train") / "models"
    for role in ("designer", "executor"):
        config = json.loads((models / role / "adapter_config.json").read_text())
        assert config["r"] == 4 and config["lora_alpha"] == 8
    merged = tmp_path / "executor_merged"
    assert (merged / "config.json").is_file() and list(merged.glob("*.safetensors"))
    assert not (merged / "adapter_config.json").exists()  # a full model folder, not an adapter


@pytest.mark.slow
def test_08_eval_in_the_table_1_layout(tmp_path):
    output = run_example(
        "08_eval_table1.sh", tmp_path, "--executor-max-tokens", "16", "--designer-max-tokens", "32",
        MODELS="tiny", METHODS="sa fixed:single_math auto", LIMIT="1", N="1",
    )  # fmt: skip
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["complete"] and list(results["cells"]) == ["tiny"]
    (benchmark,) = results["cells"]["tiny"]["benchmarks"].values()
    assert set(benchmark) == {"sa", "fixed:single_math", "auto"}
    table = (tmp_path / "table.md").read_text()
    assert "Table 1 layout" in table and table.strip() in output
    assert all(f"| tiny | {m} |" in table for m in ("sa", "fixed:single_math", "auto"))
    assert (tmp_path / "report.html").is_file()


@pytest.mark.slow
def test_09_serve_then_an_openai_client(tmp_path):
    run_example(
        "09_serve_client.py", tmp_path,
        "--model", "tiny", "--frozen-designer", "single_math", "--max-tokens", "16", "--out", str(tmp_path),
    )  # fmt: skip
    chat = json.loads((tmp_path / "chat.json").read_text())
    team = json.loads((tmp_path / "team.json").read_text())
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["choices"][0]["message"]["content"] == chat["metaagent"]["answer"]
    assert chat["usage"]["completion_tokens"] > 0
    assert team["status"] == "answered" and team["answer"]
    (design,) = team["designs"]
    assert design["valid"] and design["source"] == "frozen:template:single_math"
    assert design["executions"][0]["turns"][0]["role"] == "MathSolver"
