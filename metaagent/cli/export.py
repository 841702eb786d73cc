"""`metaagent-export`: merge a LoRA adapter into its base and write a full Hugging Face model folder.

    metaagent-export runs/lora/checkpoints/step_00000030/models/executor --out runs/lora/executor_merged
    metaagent-export RUN/checkpoints/step_00000030 --key designer --out designer_merged
    train-metaagent --config default --model runs/lora/executor_merged      # or metaagent-eval / metaagent-serve

The adapter folder of a ``policy.lora`` run names its base (``base_model_name_or_path``); ``--base`` overrides
it. The output (weights, tokenizer, and the designer prompt style the adapter was trained with) is a valid
``--model`` everywhere. ``--model ADAPTER_FOLDER`` also works directly: it is merged once into the cache.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from metaagent.cli.flags import add_debug_flag, run_main
from metaagent.errors import MetaAgentError


class ExportError(MetaAgentError, ValueError):
    """The adapter to export cannot be found; the message says where to look."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="metaagent-export",
        description="Merge a LoRA adapter (a policy.lora checkpoint) into a full model folder.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("adapter", help="an adapter folder, or a checkpoint folder with --key")
    p.add_argument("--key", help="model key inside a checkpoint folder (policy, designer, executor, role0, ...)")
    p.add_argument("--out", required=True, help="folder to write the merged model to (must not exist)")
    p.add_argument("--base", help="base model (alias or folder); default: the one the adapter names")
    add_debug_flag(p)
    return p


def adapter_folder(path: Path, key: str | None) -> Path:
    """The adapter folder ``path`` names: itself, or ``models/<key>`` of a checkpoint."""
    if key is not None:
        from metaagent.learn.checkpoint import model_path

        path = model_path(path, key)
    if not (path / "adapter_config.json").is_file():
        hint = " (a checkpoint folder needs --key)" if (path / "meta.json").is_file() else ""
        raise ExportError(f"{path} is not a LoRA adapter folder: no adapter_config.json{hint}")
    return path


def _main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from metaagent.policy.cold_start import adapter_base
    from metaagent.policy.models import PROMPT_FILE, merge_adapter

    adapter = adapter_folder(Path(args.adapter), args.key)
    out = Path(args.out)
    if out.exists():
        raise ExportError(f"--out {out} exists; pass a new folder")
    base = args.base or adapter_base(adapter)
    merge_adapter(adapter, out, base=base)
    if (adapter / PROMPT_FILE).is_file():  # the designer prompt style travels with the weights
        shutil.copyfile(adapter / PROMPT_FILE, out / PROMPT_FILE)
    print(f"metaagent-export: merged {adapter} into {base} -> {out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    code = run_main("metaagent-export", _main, argv)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
