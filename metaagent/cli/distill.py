"""`metaagent-distill`: distil designer and executor SFT data from a teacher model (paper App. A).

    # teacher: DeepSeek (the defaults), key in $DEEPSEEK_API_KEY
    metaagent-distill --data bundled:train --out sft_data/deepseek
    # any OpenAI-compatible endpoint
    metaagent-distill --base-url http://127.0.0.1:8000/v1 --model my-model --api-key-env NONE --out runs/distill
    # no teacher: templates as designer, the embedded model as executor (how sft_data/ is made)
    metaagent-distill --template-only --executor-model embedded --rollout-config default \\
        --data bundled:train --levels 1 2 --out sft_data

Interrupt it at any time and run the same command again: finished tasks are kept and skipped. Rollout
settings can be overridden as ``rollout.field=value`` (e.g. ``rollout.executor.temperature=0.5``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from typing import Any

from metaagent.cli.flags import Parser, add_config_flags, add_debug_flag, config_values, run_main
from metaagent.domain import domain_names

#: the teacher flags of earlier releases, kept as aliases of their fields
ALIASES = {
    "--base-url": "teacher.base_url",
    "--model": "teacher.model",
    "--api-key-env": "teacher.api_key_env",
    "--max-concurrency": "teacher.max_concurrency",
    "--max-retries": "teacher.max_retries",
    "--timeout": "teacher.timeout_s",
}


def build_parser() -> argparse.ArgumentParser:
    from metaagent.distill.config import DistillConfig

    p = Parser(
        prog="metaagent-distill",
        description="Distil designer and executor SFT data (chat messages JSONL) from a teacher or from templates.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("overrides", nargs="*", metavar="rollout.field=value", help="rollout config overrides")
    p.add_argument("--config", "-c", metavar="YAML", help="YAML file of DistillConfig fields (flags override it)")
    p.add_argument(
        "--rollout-config",
        metavar="YAML",
        help="take rollout settings from a train config's rollout: section (a file or a packaged config name)",
    )
    p.add_argument("--m-designs", type=int, help="shortcut: rollout.m_designs (designs per task)")
    p.add_argument("--n-executions", type=int, help="shortcut: rollout.n_executions (executions per design)")
    p.add_argument("--k-templates", type=int, help="shortcut: rollout.k_templates (in-context templates)")
    p.add_argument("--no-variation", action="store_true", help="use the templates verbatim (vary=false)")
    p.add_argument("--no-trees", action="store_true", help="do not write trees.jsonl (save_trees=false)")
    p.add_argument("--threads", type=int, help="torch CPU threads for the local executor (1 is best on a busy machine)")
    p.add_argument("--verbose", "-v", action="store_true", help="one line per finished task")
    add_debug_flag(p)
    add_config_flags(
        p,
        DistillConfig,
        aliases=ALIASES,
        exclude=("rollout", "command", "vary", "save_trees"),
        choices={"domain": domain_names()},
        title="DistillConfig fields",
    )
    return p


def rollout_settings(args: argparse.Namespace, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rollout section: ``base`` (the --config file's) or the mode's default, then --rollout-config,
    overrides and shortcuts."""
    from metaagent.config import ConfigError, apply_overrides, load_yaml
    from metaagent.distill.config import default_rollout

    base = base if base is not None else (load_yaml(args.config).get("rollout") if args.config else None)
    rollout = dict(base) if base else default_rollout(bool(_file_and_flags(args).get("template_only")))
    if args.rollout_config:
        section = load_yaml(args.rollout_config).get("rollout")
        if not isinstance(section, dict):
            raise ConfigError(f"{args.rollout_config} has no rollout: section")
        rollout = section
    bad = [o for o in args.overrides if not o.startswith("rollout.")]
    if bad:
        raise ConfigError(f"overrides must be rollout.field=value, got {bad}")
    rollout = apply_overrides({"rollout": rollout}, args.overrides)["rollout"]
    for flag, key in (
        ("m_designs", "m_designs"),
        ("n_executions", "n_executions"),
        ("k_templates", "k_templates"),
    ):
        if getattr(args, flag) is not None:
            rollout[key] = getattr(args, flag)
    return rollout


def _file_and_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The --config file's fields with the flags the user set on top (the teacher section merged)."""
    from metaagent.config import load_yaml

    values = dict(load_yaml(args.config)) if args.config else {}
    flags = config_values(args)
    if isinstance(values.get("teacher"), dict) and "teacher" in flags:
        flags["teacher"] = {**values["teacher"], **flags["teacher"]}
    values.update(flags)
    return values


def build_config(args: argparse.Namespace):
    from metaagent.config import from_dict
    from metaagent.distill.config import DistillConfig

    values = _file_and_flags(args)
    values["rollout"] = rollout_settings(args, values.get("rollout"))
    values["command"] = shlex.join(["metaagent-distill", *sys.argv[1:]])
    if args.no_variation:
        values["vary"] = False
    if args.no_trees:
        values["save_trees"] = False
    return from_dict(DistillConfig, values)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    code = run_main("metaagent-distill", _main, argv)
    if code:
        sys.exit(code)


def _main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from metaagent.distill import Distiller
    from metaagent.distill.progress import DistillProgress

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    config = build_config(args)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # a kill stops like Ctrl-C: finished tasks stay committed
    progress = DistillProgress(verbose=args.verbose)
    distiller = None
    try:
        distiller = Distiller(config, observer=progress)
        if distiller.store.repair.any:
            progress.console.print(
                f"repaired {config.out} after an interruption: torn lines {distiller.store.repair.torn_lines}, "
                f"lines of unfinished tasks dropped {distiller.store.repair.orphan_lines}"
            )
        summary = distiller.run()
    except KeyboardInterrupt:
        progress.stop()
        print(
            f"metaagent-distill: interrupted; finished tasks are saved in {config.out}. "
            "Run the same command again to continue.",
            file=sys.stderr,
        )
        if distiller is not None:
            distiller.close()
        os._exit(130)  # in-flight rollouts are abandoned (their tasks were not committed)
    except BaseException:
        progress.stop()
        if distiller is not None:
            distiller.close()
        raise
    progress.stop()
    distiller.close()
    t = summary.totals
    rate = f"{t.acceptance:.1%}" if t.acceptance is not None else "n/a"
    print(
        f"metaagent-distill: {len(summary.processed)} tasks this run ({summary.skipped_done} already done), "
        f"{t.tasks_done}/{t.tasks_total} done in total; kept {t.designer} designer and {t.executor} executor "
        f"examples; execution acceptance {rate}; tokens {t.tokens:,}; output in {config.out}",
        file=sys.stderr,
    )
    if summary.failed:
        print(
            f"metaagent-distill: {len(summary.failed)} task(s) failed and will be retried on resume:",
            file=sys.stderr,
        )
        for task_id, error in list(summary.failed.items())[:10]:
            print(f"  {task_id}: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
