"""`train-metaagent`: train the designer and executor roles with stagewise hierarchical GRPO.

    train-metaagent --config configs/default.yaml --stage-len 30 --steps 6
    train-metaagent --config configs/tiny.yaml rollout.m_designs=4 optim.lr=1e-5
    train-metaagent --config configs/paper_qwen3_8b.yaml --backend verl --dry-run
    train-metaagent --config tiny_verl_cpu        # verl's FSDP engine on CPU workers, no GPU

``--config`` takes a config of the repository's ``configs/`` by name (``default``) or by that path (also
outside the checkout: the wheel ships them), or the path of a YAML file of your own. Every config field can be
overridden as ``section.field=value``; the flags below are shortcuts.
"""

from __future__ import annotations

import argparse
import sys

from metaagent.cli.flags import Parser, add_config_flags, add_debug_flag, config_overrides, run_main
from metaagent.config import ConfigError

#: the short flags of the common fields (every field also has its own --section.field flag)
ALIASES = {
    "--stage-len": "schedule.stage_len",
    "--mode": "schedule.mode",
    "--m-designs": "rollout.m_designs",
    "--n-executions": "rollout.n_executions",
    "--steps": "trainer.steps",
    "--model": "policy.model",
    "--out": "trainer.out",
    "--seed": "trainer.seed",
    "--frozen-designer": "rollout.frozen_designer",
    "--backend": "trainer.backend",
}


def build_parser() -> argparse.ArgumentParser:
    from metaagent.train.config import TrainConfig

    p = Parser(
        prog="train-metaagent",
        description="Train one model to design multi-agent teams and to be their agents (stagewise GRPO).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Any config field: --section.field VALUE or section.field=value, e.g. rollout.k_templates=1 optim.lr=1e-5",
    )
    p.add_argument("overrides", nargs="*", metavar="section.field=value", help="config overrides")
    p.add_argument(
        "--config", "-c", default=None,
        help="YAML config: a file, or a packaged config by name (default, tiny, tiny_verl_cpu, paper_qwen3_8b, single_gpu_qwen3_1_7b)",
    )  # fmt: skip
    p.add_argument("--resume", nargs="?", const=True, default=None, metavar="CHECKPOINT",
                   help="continue from the newest checkpoint of --out, or from the given checkpoint folder")
    p.add_argument("--dry-run", action="store_true", help="validate the config and print the resolved plan")
    p.add_argument("--quiet", action="store_true", help="no sample outputs in the log")
    add_debug_flag(p)
    add_config_flags(p, TrainConfig, aliases=ALIASES)
    return p


def resolve_config(args: argparse.Namespace):
    from metaagent.train.config import TrainConfig

    return TrainConfig.load(args.config or "default", [*config_overrides(args), *args.overrides])


def main(argv: list[str] | None = None) -> None:
    code = run_main("train-metaagent", _main, argv)
    if code:
        sys.exit(code)


def _main(argv: list[str] | None = None) -> None:
    # intermixed: ``section.field=value`` overrides may stand before, between or after flags
    args = build_parser().parse_intermixed_args(argv)
    config = resolve_config(args)

    plan = None
    if config.trainer.backend == "verl":
        from metaagent.train.verl_backend import plan_text

        plan, text = plan_text(config)
        print(text, flush=True)
        if args.dry_run:
            sys.exit(0)
    elif args.dry_run:
        import yaml

        print(yaml.safe_dump(config.to_dict(), sort_keys=False))
        return
    sys.exit(run(config, plan=plan, resume=args.resume, quiet=args.quiet))


def check_models(config) -> None:
    """Every model a local-backend run loads is there (an alias's package, a local folder, a hub id in the
    cache or downloaded now), checked before torch is imported: a bad ``--model`` fails at once, in one
    line."""
    from metaagent.policy.models import locate_model

    p = config.policy
    names = [p.model_for("designer"), p.model_for("executor"), *p.role_models.values(), config.critic.model]
    for name in dict.fromkeys(n for n in names if n):
        locate_model(name)


def run(config, *, plan=None, resume: str | bool | None = None, quiet: bool = False) -> int:
    """Train with the configured backend, showing progress; returns the exit code (0 done, 1 the run
    failed, 2 it could not start, 128 + the signal's number when SIGINT / SIGTERM stopped it: 130 for Ctrl-C,
    after a checkpoint of the steps done, see :class:`metaagent.train.loop.TrainInterrupted`)."""
    from metaagent.train.loop import TrainInterrupted

    try:
        return _run(config, plan=plan, resume=resume, quiet=quiet)
    except TrainInterrupted as e:
        print(f"train-metaagent: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:  # outside the steps (the models loading, the run closing): nothing to save
        print("train-metaagent: interrupted outside a step; checkpoints written are kept", file=sys.stderr)
        return 130


def _run(config, *, plan=None, resume: str | bool | None = None, quiet: bool = False) -> int:
    """``plan``: the verl backend's resolved plan (:func:`metaagent.train.verl_backend.plan_text`), passed on."""
    verl = config.trainer.backend == "verl"
    try:
        if config.trainer.backend == "local":  # verl hands hub ids to its workers, which fetch them
            check_models(config)  # before the imports below: they bring torch in
    except FileNotFoundError as e:
        print(f"train-metaagent: {e}", file=sys.stderr)
        return 2
    from metaagent.cli.display import TrainDisplay
    from metaagent.learn.checkpoint import CheckpointError
    from metaagent.learn.trackers import TrackerError
    from metaagent.train.backend import BackendError, make_backend
    from metaagent.train.loop import TrainError, TrainInterrupted, TrainLoop

    display = TrainDisplay(show_samples=config.trainer.show_samples and not quiet)
    start_errors: tuple[type[BaseException], ...] = (
        TrainError, BackendError, ConfigError, CheckpointError, TrackerError, FileNotFoundError, ValueError,
    )  # fmt: skip
    run_errors: tuple[type[BaseException], ...] = (TrainError, BackendError, CheckpointError)
    try:
        backend = make_backend(config, **({"plan": plan} if verl and plan is not None else {}))
        trainer = TrainLoop(config, backend, resume=resume, observer=display)
    except start_errors as e:
        print(f"train-metaagent: {e}", file=sys.stderr)
        return 2
    try:
        with trainer:
            display.header(config, trainer.start_step, str(trainer.run_dir), slots=trainer.sampler.slots)
            trainer.train(on_step=lambda r: display.step_done(r.step, r.metrics, r.trees))
    except TrainInterrupted:
        raise
    except run_errors as e:
        print(f"train-metaagent: {e}", file=sys.stderr)
        return 1
    hint = ""
    if verl:
        hint = " (to Hugging Face: python -m metaagent.train.verl_backend.convert <checkpoint> <out>)"
    display.console.print(
        f"done: metrics in {trainer.run_dir / 'metrics.jsonl'}, rollouts in {trainer.run_dir / 'rollouts'}, "
        f"checkpoints in {trainer.run_dir / 'checkpoints'}{hint}"
    )
    return 0


if __name__ == "__main__":
    main()
