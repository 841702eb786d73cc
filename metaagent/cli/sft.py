"""`metaagent-sft`: supervised fine-tuning (cold start) on distilled chat data.

    metaagent-sft --data sft_data/designer.jsonl sft_data/executor.jsonl --model embedded --out runs/sft \\
        --lora-rank 8 --epochs 2 --threads 1
    metaagent-sft ... --resume                      # continue from the newest checkpoint of --out
    train-metaagent --config default --model runs/sft/model

The output folder OUT/model (the newest checkpoint's merged model) is a valid --model for train-metaagent,
metaagent-serve and HFPolicy; with LoRA, OUT/adapter is the adapter alone.
"""

from __future__ import annotations

import argparse
import sys

from metaagent.cli.flags import Parser, add_config_flags, add_debug_flag, load_flat_config, run_main


def build_parser() -> argparse.ArgumentParser:
    from metaagent.sft.trainer import SFTConfig

    p = Parser(
        prog="metaagent-sft",
        description="Supervised fine-tuning on chat-messages JSONL (loss on the assistant reply only).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("--config", "-c", help="YAML file of SFTConfig fields (flags override it)")
    p.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=None,
        metavar="CHECKPOINT",
        help="continue from the newest checkpoint of --out, or from the given checkpoint folder",
    )
    add_debug_flag(p)
    add_config_flags(p, SFTConfig, aliases={"--batch-tokens": "micro_batch_tokens"}, title="SFTConfig fields")
    return p


def main(argv: list[str] | None = None) -> None:
    code = run_main("metaagent-sft", _main, argv)
    if code:
        sys.exit(code)


def _main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from metaagent.sft.trainer import SFTConfig, SFTTrainer, sft_samples_summary

    config = load_flat_config(SFTConfig, args.config, args)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    try:
        trainer = SFTTrainer(config, resume=args.resume, log=log)
        s = sft_samples_summary(trainer.samples)
        dropped = trainer.samples.metrics.get("sft/dropped_long", 0)
        log(
            f"metaagent-sft: {int(s['examples'])} examples ({int(dropped)} longer than --max-len dropped), "
            f"mean {s['mean_tokens']:.0f} / max {int(s['max_tokens'])} tokens; {trainer.total_steps} steps "
            f"({trainer.steps_per_epoch}/epoch); {'LoRA rank ' + str(config.lora_rank) if config.lora_rank else 'full fine-tuning'}, "
            f"lr {config.lr:g}"
        )
        final = trainer.run()
    except KeyboardInterrupt:
        sys.exit("metaagent-sft: interrupted; continue with the same command and --resume")
    log(f"metaagent-sft: done. Model: {final} (use it as --model)")


if __name__ == "__main__":
    main()
