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


def build_parser() -> argparse.ArgumentParser:
    from metaagent.distill.config import DEEPSEEK_BASE_URL, DEEPSEEK_KEY_ENV, DEEPSEEK_MODEL

    p = argparse.ArgumentParser(
        prog="metaagent-distill",
        description="Distil designer and executor SFT data (chat messages JSONL) from a teacher or from templates.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("overrides", nargs="*", metavar="rollout.field=value", help="rollout config overrides")
    p.add_argument("--out", required=True, help="output directory (resumed if it exists)")
    g = p.add_argument_group("teacher (OpenAI-compatible endpoint)")
    g.add_argument("--base-url", default=DEEPSEEK_BASE_URL, help=f"API root (default {DEEPSEEK_BASE_URL})")
    g.add_argument("--model", default=DEEPSEEK_MODEL, help=f"served model name (default {DEEPSEEK_MODEL})")
    g.add_argument(
        "--api-key-env",
        default=DEEPSEEK_KEY_ENV,
        help=f"environment variable holding the API key (default {DEEPSEEK_KEY_ENV})",
    )
    g.add_argument("--max-concurrency", type=int, default=16, help="teacher requests in flight (default 16)")
    g.add_argument("--max-retries", type=int, default=5, help="retries with backoff per request (default 5)")
    g.add_argument("--timeout", type=float, default=120.0, help="seconds per request attempt (default 120)")
    t = p.add_argument_group("template-only mode (no teacher)")
    t.add_argument(
        "--template-only",
        action="store_true",
        help="templates (with meaning-preserving variation) are the designer; a local model executes",
    )
    t.add_argument(
        "--executor-model",
        default="embedded",
        help="local executor: embedded, tiny or an HF directory (default embedded)",
    )
    t.add_argument("--device", default="cpu")
    t.add_argument("--no-variation", action="store_true", help="use the templates verbatim")
    t.add_argument(
        "--max-script-tokens", type=int, help="longest designer reply (default: designer max_tokens - 8)"
    )
    t.add_argument(
        "--threads", type=int, help="torch CPU threads for the local executor (1 is best on a busy machine)"
    )
    d = p.add_argument_group("tasks and rollout")
    d.add_argument(
        "--data",
        nargs="+",
        default=["bundled:train"],
        help="dataset specs source[:split][@path] (default bundled:train)",
    )
    d.add_argument("--levels", nargs="+", type=int, help="keep tasks of these levels (bundled set)")
    d.add_argument("--domain", choices=["math", "code"], help="keep only this domain")
    d.add_argument("--limit", type=int, help="first N tasks of each dataset")
    d.add_argument("--max-tasks", type=int, help="process at most N not-yet-done tasks in this invocation")
    d.add_argument(
        "--rollout-config",
        metavar="YAML",
        help="take rollout settings from a train config's rollout: section",
    )
    d.add_argument("--m-designs", type=int, help="designs per task")
    d.add_argument("--n-executions", type=int, help="executions per design")
    d.add_argument("--k-templates", type=int, help="in-context templates in the designer prompt")
    d.add_argument("--tasks-in-flight", type=int, default=4, help="tasks rolled out at once (default 4)")
    d.add_argument(
        "--keep-all", action="store_true", help="keep incorrect executions too, labelled correct: false"
    )
    d.add_argument("--no-trees", action="store_true", help="do not write trees.jsonl (full rollout records)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--verbose", "-v", action="store_true", help="one line per finished task")
    return p


def rollout_settings(args: argparse.Namespace) -> dict[str, Any]:
    from metaagent.config import ConfigError, apply_overrides, load_yaml
    from metaagent.distill.config import default_rollout

    rollout = default_rollout(args.template_only)
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


def build_config(args: argparse.Namespace):
    from metaagent.distill.config import DistillConfig, TeacherConfig

    return DistillConfig(
        out=args.out,
        template_only=args.template_only,
        teacher=TeacherConfig(
            base_url=args.base_url,
            model=args.model,
            api_key_env=args.api_key_env,
            max_concurrency=args.max_concurrency,
            timeout_s=args.timeout,
            max_retries=args.max_retries,
        ),
        executor_model=args.executor_model,
        device=args.device,
        data=list(args.data),
        levels=args.levels,
        domain=args.domain,
        limit=args.limit,
        rollout=rollout_settings(args),
        max_tasks=args.max_tasks,
        tasks_in_flight=args.tasks_in_flight,
        keep_all=args.keep_all,
        vary=not args.no_variation,
        max_script_tokens=args.max_script_tokens,
        seed=args.seed,
        save_trees=not args.no_trees,
        command=shlex.join(["metaagent-distill", *sys.argv[1:]]),
    )


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from metaagent.config import ConfigError
    from metaagent.data import DataError
    from metaagent.distill import Distiller, DistillError, StoreError, TeacherError
    from metaagent.distill.progress import DistillProgress

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        config = build_config(args)
    except (ConfigError, DataError, ValueError) as e:
        sys.exit(f"metaagent-distill: {e}")
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
    except (ConfigError, DataError, DistillError, StoreError, TeacherError, FileNotFoundError) as e:
        progress.stop()
        if distiller is not None:
            distiller.close()
        sys.exit(f"metaagent-distill: {e}")
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
