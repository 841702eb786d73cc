"""sa+grpo (issue 61): ``configs/sa_grpo_suite.yaml`` and co-evolution v2's ``sa_grpo`` mode are the
same training run (the five-family preset with a frozen single-agent designer and the designer runs' M x N
executions a question), and the mode trains the trainer's executor_only."""

from __future__ import annotations

import argparse
import sys

from builders import benchmark_script

from metaagent.cli.train import build_parser, resolve_config
from metaagent.resources import config_path

FIVE = ["arith", "code", "lookup", "start", "strings"]


def _args(v2, **kw) -> argparse.Namespace:
    """The five-family run's flags (benchmarks/results/coevolution_v2_five/STATUS.md) for seed 0."""
    values = dict(
        families=FIVE, batch_size=5, designs=4, executions=2, designer_max_tokens=384, executor_max_tokens=192,
        config="default", model="embedded-sft-suite", stage_len=5, steps=40, save_every=5, seed=0,
    )  # fmt: skip
    values.update(kw)
    args = argparse.Namespace(**values)
    args.train_args = [*v2.suite_overrides(args), "optim.lr=2e-5"]
    args.recipes = v2.recipes(args)
    return args


def _config(argv):
    return resolve_config(build_parser().parse_intermixed_args(argv))


def test_sa_grpo_mode_trains_the_shipped_recipe():
    v2 = benchmark_script("coevolution_v2")
    args = _args(v2, domain_hint="off")  # the recipe's designer prompt has no domain sentence (issue 62)
    cmd = v2.v1.train_command(args, v2.SA_GRPO, "runs/sa_grpo_suite")
    assert cmd[:3] == [sys.executable, "-m", "metaagent.cli.train"]
    assert cmd[cmd.index("--mode") + 1] == "executor_only"
    mode = _config(cmd[3:]).to_dict()
    recipe = _config(["--config", str(config_path("sa_grpo_suite"))]).to_dict()
    assert mode == recipe and recipe["rollout"]["domain_hint"] == "off"
    assert (
        mode["rollout"]["frozen_designer"],
        mode["rollout"]["m_designs"],
        mode["rollout"]["n_executions"],
    ) == (
        "sa",
        1,
        8,
    )


def test_sa_grpo_sees_the_designer_runs_data_and_rollouts_per_question():
    v2 = benchmark_script("coevolution_v2")
    args = _args(v2)
    designer = _config(v2.v1.train_command(args, "designer_only", "runs/x")[3:]).to_dict()
    single = _config(v2.v1.train_command(args, v2.SA_GRPO, "runs/x")[3:]).to_dict()
    assert designer["data"] == single["data"] and designer["trainer"]["steps"] == single["trainer"]["steps"]
    assert designer["optim"] == single["optim"] and designer["policy"] == single["policy"]
    per_question = designer["rollout"]["m_designs"] * designer["rollout"]["n_executions"]
    assert single["rollout"]["m_designs"] * single["rollout"]["n_executions"] == per_question == 8
    assert single["schedule"]["mode"] == "executor_only" and designer["rollout"]["frozen_designer"] is None


def test_other_seeds_get_folders_of_their_own():
    v2 = benchmark_script("coevolution_v2")
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", default="runs/coevolution_v2")
    parser.add_argument("--results", default="benchmarks/results/coevolution_v2")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(["--seed", "2"])
    v2.seed_folders(args, parser)
    assert (args.runs, args.results) == (
        "runs/coevolution_v2_seed2",
        "benchmarks/results/coevolution_v2_seed2",
    )
    given = parser.parse_args(["--seed", "2", "--runs", "mine"])
    v2.seed_folders(given, parser)
    assert given.runs == "mine"


def test_baselines_add_the_equal_compute_methods_and_choose_among_the_matrix_templates():
    v2 = benchmark_script("coevolution_v2")
    oracle = v2.Oracle("m.json", {"arith": "fixed:tool_pair"}, {"arith": "tool-pair"},
                       {"arith": {"sa", "fixed:tool_pair", "auto"}, "code": {"sa", "fixed:solver_tester"}}, "sa")  # fmt: skip
    args = argparse.Namespace(baselines=True, sa_k=0)
    assert v2.baseline_methods(args, oracle, "arith") == ("sa@auto", "best-per-domain", "fixed:pot")
    assert v2.baseline_methods(argparse.Namespace(baselines=True, sa_k=3), oracle, "code") == (
        "sa@3",
        "best-per-domain",
    )
    assert v2.best_of(oracle, "arith") == ("fixed:pot", "fixed:tool_pair", "sa")
    assert v2.best_of(oracle, "code") == ("fixed:solver_tester", "sa")
    assert v2.baseline_methods(argparse.Namespace(baselines=False, sa_k=0), oracle, "arith") == ()
