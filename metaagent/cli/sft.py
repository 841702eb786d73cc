"""`metaagent-sft`: supervised fine-tuning (cold start) on distilled chat data.

    metaagent-sft --data sft_data/designer.jsonl sft_data/executor.jsonl --model embedded --out runs/sft \\
        --lora-rank 8 --epochs 2 --threads 1
    metaagent-sft ... --resume                      # continue from the newest checkpoint of --out
    train-metaagent --config configs/default.yaml --model runs/sft/model

The output folder OUT/model (the newest checkpoint's merged model) is a valid --model for train-metaagent,
metaagent-serve and HFPolicy; with LoRA, OUT/adapter is the adapter alone.
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="metaagent-sft",
        description="Supervised fine-tuning on chat-messages JSONL (loss on the assistant reply only).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("--data", nargs="+", required=True, help="JSONL files of {'messages': [...]} examples")
    p.add_argument(
        "--model", default="embedded", help="embedded, embedded-sft, tiny or a local HF directory (default embedded)"
    )
    p.add_argument("--out", default="runs/sft", help="run directory (default runs/sft)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, help="stop after this many optimizer steps")
    p.add_argument(
        "--lr", type=float, help="peak learning rate (default 2e-4 with LoRA, 1e-5 full fine-tuning)"
    )
    p.add_argument("--batch-size", type=int, default=8, help="examples per optimizer step (default 8)")
    p.add_argument(
        "--batch-tokens", type=int, default=4096, help="padded tokens per micro-batch (default 4096)"
    )
    p.add_argument("--max-len", type=int, default=1536, help="drop examples longer than this many tokens")
    p.add_argument("--kinds", nargs="+", choices=["designer", "executor"], default=["designer", "executor"])
    p.add_argument("--lora-rank", type=int, default=0, help="LoRA rank; 0 = full fine-tuning (default)")
    p.add_argument("--lora-alpha", type=float, help="LoRA alpha (default 2 x rank)")
    p.add_argument("--lora-dropout", type=float, default=0.0)
    p.add_argument("--lora-targets", default="all-linear", help="all-linear or comma-separated module names")
    p.add_argument("--schedule", choices=["cosine", "constant"], default="cosine")
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--min-lr-ratio", type=float, default=0.1, help="cosine floor as a fraction of --lr")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--save-every", type=int, default=0, help="checkpoint every k steps (0 = only at the end)")
    p.add_argument("--keep-last", type=int, help="keep only the newest k checkpoints")
    p.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=None,
        metavar="CHECKPOINT",
        help="continue from the newest checkpoint of --out, or from the given checkpoint folder",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, help="torch CPU threads (1 is fastest on a busy 2-core machine)")
    p.add_argument("--tensorboard", action="store_true", help="also log to OUT/tensorboard")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from metaagent.config import ConfigError
    from metaagent.sft.data import SFTDataError
    from metaagent.sft.trainer import SFTConfig, SFTError, SFTTrainer, sft_samples_summary

    try:
        config = SFTConfig(
            data=args.data,
            model=args.model,
            out=args.out,
            epochs=args.epochs,
            max_steps=args.max_steps,
            lr=args.lr,
            batch_size=args.batch_size,
            batch_tokens=args.batch_tokens,
            max_len=args.max_len,
            kinds=args.kinds,
            lora_rank=args.lora_rank,
            lora_alpha=args.lora_alpha,
            lora_dropout=args.lora_dropout,
            lora_targets=args.lora_targets,
            schedule=args.schedule,
            warmup_steps=args.warmup_steps,
            min_lr_ratio=args.min_lr_ratio,
            weight_decay=args.weight_decay,
            grad_clip=args.grad_clip,
            save_every=args.save_every,
            keep_last=args.keep_last,
            seed=args.seed,
            device=args.device,
            threads=args.threads,
            tensorboard=args.tensorboard,
        )
        log = lambda line: print(line, file=sys.stderr, flush=True)
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
    except (ConfigError, SFTError, SFTDataError, FileNotFoundError) as e:
        sys.exit(f"metaagent-sft: {e}")
    except KeyboardInterrupt:
        sys.exit("metaagent-sft: interrupted; continue with the same command and --resume")
    log(f"metaagent-sft: done. Model: {final} (use it as --model)")


if __name__ == "__main__":
    main()
