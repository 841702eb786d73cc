"""Every command: --help is generated from its config's fields; a wrong type or an unknown key, in a YAML
file or on the command line, is one line on stderr naming it, with a non-zero exit; --debug shows the
traceback instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cli(module: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", f"metaagent.cli.{module}", *args],
        cwd=cwd or ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def one_error_line(r: subprocess.CompletedProcess, prog: str, *needles: str) -> str:
    assert r.returncode != 0, r.stdout[-500:]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"{prog}: ") and "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


# module, prog, generated flag -> a phrase of its help, flags that make the command fail early
HELP = {
    "train": ("train-metaagent", {"--optim.lr": "FLOAT", "--optim.stage-switch": "AdamW moments",
                                  "--rollout.m-designs": "designs sampled per task", "--stage-len": "--schedule.stage-len"}),
    "sft": ("metaagent-sft", {"--lora-rank": "LoRA", "--batch-tokens": "micro-batch", "--max-len": "dropped"}),
    "serve": ("metaagent-serve", {"--max-concurrent-requests": "429", "--executor-sampling.max-tokens": "INT",
                                  "--workers": "--sandbox-workers"}),
    "distill": ("metaagent-distill", {"--teacher.max-retries": "INT", "--tasks-in-flight": "(default 4)",
                                      "--base-url": "--teacher.base-url"}),
    "eval": ("metaagent-eval", {"--bootstrap": "[>= 100]", "--model": "--models", "--top-p": "[> 0, <= 1]",
                                "--template-selection": "{domain,uniform}"}),
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(HELP))
def test_help_lists_flags_generated_from_the_config(module):
    prog, flags = HELP[module]
    r = cli(module, "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    body = text[text.index("options:") :]  # the option list, after the usage lines
    for flag, phrase in flags.items():
        start = body.index(f" {flag} ") if phrase.startswith("--") else body.index(f" {flag}")
        window = body[max(0, start - 60) : start + 400]
        assert phrase in window, (flag, phrase, window)
    assert "--debug" in text


# a wrong type on the command line, an unknown flag/key on the command line, each per command
BAD_ARGS = {
    "train": [(["--config", "tiny", "--optim.lr", "abc"], "optim.lr"),
              (["--config", "tiny", "optim.lrr=1e-5"], "optim.lrr"),
              (["--config", "tiny", "--rollout.m-design", "3"], "--rollout.m-design")],
    "sft": [(["--data", "x.jsonl", "--max-len", "long"], "max_len"),
            (["--data", "x.jsonl", "--lora-rnak", "8"], "--lora-rnak")],
    "serve": [(["--max-batch-size", "many"], "max_batch_size"),
              (["--max-bach-size", "3"], "--max-bach-size")],
    "distill": [(["--out", "OUT", "--tasks-in-flight", "x"], "tasks_in_flight"),
                (["--out", "OUT", "--teacher.modle", "m"], "--teacher.modle")],
    "eval": [(["--out", "OUT", "--n", "three"], "n = 'three'"),
             (["--out", "OUT", "--bootstrap", "10"], "bootstrap = 10: Input should be greater than or equal to 100"),
             (["--out", "OUT", "--nn", "3"], "--nn")],
}  # fmt: skip


@pytest.mark.parametrize("module, args, needle", [(m, a, n) for m, cases in BAD_ARGS.items() for a, n in cases])
def test_bad_command_line_values_are_one_line(module, args, needle, tmp_path):
    args = [str(tmp_path / a) if a == "OUT" else a for a in args]
    one_error_line(cli(module, *args), HELP[module][0], needle)


YAML = {
    "train": ("optim:\n  lr: fast\n", "optim.lr", "optim:\n  lrr: 0.1\n", "optim.lrr"),
    "sft": ("data: [x.jsonl]\nepochs: many\n", "epochs", "data: [x.jsonl]\nepoch: 2\n", "epoch"),
    "serve": ("port: http\n", "port", "prot: 8000\n", "prot"),
    "eval": ("n: many\n", "n = 'many'", "samples: 3\n", "samples"),
    "distill": ("out: x\nteacher: {max_retries: lots}\n", "teacher.max_retries", "out: x\nmax_task: 3\n", "max_task"),
}


@pytest.mark.parametrize("module", sorted(YAML))
def test_bad_yaml_values_are_one_line(module, tmp_path):
    wrong_type, type_key, unknown, unknown_key = YAML[module]
    for text, key in ((wrong_type, type_key), (unknown, unknown_key)):
        path = tmp_path / f"{module}.yaml"
        path.write_text(text)
        one_error_line(cli(module, "--config", str(path)), HELP[module][0], key)


def test_a_config_is_a_name_a_checkout_path_or_any_path(tmp_path, monkeypatch):
    from metaagent.config import ConfigError
    from metaagent.train.config import TrainConfig

    default = ROOT / "configs" / "default.yaml"
    mine = tmp_path / "mine.yaml"
    mine.write_text("rollout:\n  m_designs: 3\n")
    expected = TrainConfig.load(str(default)).to_dict()
    monkeypatch.chdir(ROOT)
    for spec in ("default", "default.yaml", "configs/default.yaml", str(default)):
        assert TrainConfig.load(spec).to_dict() == expected, spec
    monkeypatch.chdir(tmp_path)  # outside the checkout: configs/NAME.yaml is the shipped config of that name
    assert TrainConfig.load("configs/default.yaml").to_dict() == expected
    assert TrainConfig.load("mine.yaml").rollout.m_designs == 3
    assert TrainConfig.load(str(mine)).rollout.m_designs == 3
    refused = r"neither a file nor a config name; pass a path to a YAML file or one of: at_grpo_code, "
    for bad in ("defualt", "configs/defualt.yaml", str(tmp_path / "default.yaml"), "elsewhere/tiny.yaml"):
        with pytest.raises(ConfigError, match=refused):
            TrainConfig.load(bad)


def test_a_bad_config_name_is_one_line_listing_the_names():
    line = one_error_line(cli("train", "--config", "defualt", "--dry-run"), "train-metaagent", "'defualt'")
    names = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))
    assert line.endswith("one of: " + ", ".join(names)), line


def test_unknown_key_gets_a_suggestion():
    line = one_error_line(cli("train", "--config", "tiny", "rollout.m_design=2"), "train-metaagent")
    assert "did you mean rollout.m_designs?" in line


def test_train_overrides_may_stand_between_flags():
    # argparse's plain parse_args takes the positional overrides only once: "a=1 --out x b=2" was refused
    from metaagent.cli.train import build_parser, resolve_config

    argv = ["--config", "tiny", "rollout.m_designs=3", "--steps", "2", "trainer.seed=7", "--out", "o", "optim.lr=0.5"]
    args = build_parser().parse_intermixed_args(argv)
    cfg = resolve_config(args)
    assert (cfg.rollout.m_designs, cfg.trainer.steps, cfg.trainer.seed, cfg.trainer.out, cfg.optim.lr) == (
        3, 2, 7, "o", 0.5)  # fmt: skip
    r = cli("train", *argv, "--dry-run")
    assert r.returncode == 0 and "m_designs: 3" in r.stdout and "seed: 7" in r.stdout, r.stderr


@pytest.mark.parametrize("module, args", [("train", ["--config", "tiny", "optim.lr=abc"]), ("serve", ["--port", "x"])])
def test_debug_shows_the_traceback(module, args):
    r = cli(module, *args, "--debug")
    assert r.returncode != 0 and "Traceback (most recent call last)" in r.stderr and "ConfigError" in r.stderr


def test_replay_errors_are_one_line(tmp_path):
    r = cli("replay", str(tmp_path / "no_such_run"))
    assert r.returncode != 0
    assert len([line for line in r.stderr.splitlines() if line.strip()]) == 1, r.stderr
    assert cli("replay", "--help").returncode == 0 and "--debug" in cli("replay", "--help").stdout


# declared ranges (pydantic constraints on the config fields): loading and direct construction both refuse
# a value out of range with one line naming the field, the value and what is allowed
RANGES = [
    ("train", ["optim.lr=-1"], "optim.lr = -1: Input should be greater than 0"),
    ("train", ["optim.clip_low=1.5"], "optim.clip_low = 1.5: Input should be less than 1"),
    ("train", ["optim.betas=[0.9, 1.0]"], "optim.betas[1] = [0.9, 1.0]: Input should be less than 1"),
    ("train", ["schedule.stage_len=0"], "schedule.stage_len = 0: Input should be greater than 0"),
    ("train", ["data.math_fraction=1.5"], "data.math_fraction = 1.5: Input should be less than or equal to 1"),
    ("train", ["optim.schedule=linear"], "optim.schedule = 'linear': Input should be 'constant' or 'cosine'"),
    ("train", ["rollout.k_templates=-1"], "rollout.k_templates = -1: Input should be greater than or equal to 0"),
]


@pytest.mark.parametrize("name, overrides, message", RANGES)
def test_declared_ranges_are_checked_on_load(name, overrides, message):
    from metaagent.config import ConfigError
    from metaagent.train.config import TrainConfig

    with pytest.raises(ConfigError) as e:
        TrainConfig.load("tiny", overrides)
    assert str(e.value) == message


def test_declared_ranges_are_checked_on_construction(tmp_path):
    from metaagent.config import ConfigError
    from metaagent.eval.config import EvalConfig
    from metaagent.learn.optim import LossConfig, OptimizerConfig
    from metaagent.serve.config import ServeConfig
    from metaagent.sft.trainer import SFTConfig

    cases = [
        (lambda: OptimizerConfig(warmup_steps=-2), "warmup_steps = -2: Input should be greater than or equal to 0"),
        (lambda: LossConfig(clip_ratio_c=1.0), "clip_ratio_c = 1.0: Input should be greater than 1"),
        (lambda: SFTConfig(max_len=1), "max_len = 1: Input should be greater than or equal to 2"),
        (lambda: ServeConfig(port=70000), "--port = 70000: Input should be less than or equal to 65535"),
        (lambda: EvalConfig(top_p=0.0), "top_p = 0.0: Input should be greater than 0"),
    ]
    for make, message in cases:
        with pytest.raises(ConfigError) as e:
            make()
        assert str(e.value) == message
    # lax conversion keeps working: command-line strings become numbers, lists become tuples
    assert OptimizerConfig(lr="1e-4", betas=[0.8, 0.9]).betas == (0.8, 0.9)


def test_one_optimizer_config_for_rl_and_sft():
    """RL's optim section, the local updater and SFT share one OptimizerConfig: same fields, one default
    for the micro-batch budget (the 8192 vs 4096 drift is gone)."""
    import dataclasses

    from metaagent.learn.optim import LossConfig, OptimizerConfig
    from metaagent.sft.trainer import SFTConfig
    from metaagent.train.config import OptimConfig

    names = {f.name for f in dataclasses.fields(OptimizerConfig)}
    assert names <= {f.name for f in dataclasses.fields(OptimConfig)}
    assert names <= {f.name for f in dataclasses.fields(SFTConfig)}
    assert {f.name for f in dataclasses.fields(LossConfig)} <= {f.name for f in dataclasses.fields(OptimConfig)}
    assert OptimConfig().micro_batch_tokens == SFTConfig.__dataclass_fields__["micro_batch_tokens"].default == 4096
    rl = OptimConfig(lr=1e-4, clip_low=0.1, warmup_steps=2)
    # RL's own default: bf16 autocast where the CPU has bf16 units (SFT keeps fp32)
    assert rl.optimizer() == OptimizerConfig(lr=1e-4, warmup_steps=2, autocast="auto") and rl.loss() == LossConfig(clip_low=0.1)
