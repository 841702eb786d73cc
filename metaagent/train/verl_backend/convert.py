"""Convert a verl-backend checkpoint to Hugging Face models (runs on CPU).

    python -m metaagent.train.verl_backend.convert RUN/checkpoints/step_00000300 OUT
    python -m metaagent.train.verl_backend.convert RUN/checkpoints/step_00000300 OUT --model designer

``CKPT`` is a checkpoint folder of the verl backend (with ``meta.json``) or one verl FSDP folder (with
``fsdp_config.json``). With one physical model (shared weights) ``OUT`` becomes its Hugging Face folder; with
several, ``OUT/<key>/`` each, unless ``--model`` picks one. The result is a valid ``policy.model`` /
``--model`` path (bf16 weights, tokenizer, generation config).

This wraps verl's own merger; the equivalent verl command for one model is::

    python -m verl.model_merger merge --backend fsdp --local_dir CKPT/verl/<key> --target_dir OUT
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from metaagent.learn.checkpoint import CheckpointError

from .checkpoint import verl_model_dirs


def sources(ckpt: Path, model: str | None = None) -> dict[str, Path]:
    """Model key -> verl FSDP folder to convert (``{"model": ckpt}`` for a bare FSDP folder)."""
    if (ckpt / "fsdp_config.json").is_file():
        if model is not None:
            raise CheckpointError(
                f"{ckpt} is a single verl FSDP folder; --model only applies to run checkpoints"
            )
        return {"model": ckpt}
    if not (ckpt / "meta.json").is_file():
        raise CheckpointError(
            f"{ckpt} is neither a metaagent checkpoint (meta.json) nor a verl FSDP folder (fsdp_config.json)"
        )
    dirs = verl_model_dirs(ckpt)
    if model is not None:
        if model not in dirs:
            raise CheckpointError(f"checkpoint {ckpt} has no model {model!r}; it has {sorted(dirs)}")
        return {model: dirs[model]}
    return dirs


def targets(srcs: dict[str, Path], out: Path) -> dict[str, Path]:
    """One model converts into ``out`` itself, several into ``out/<key>``."""
    return {k: out for k in srcs} if len(srcs) == 1 else {k: out / k for k in srcs}


def merge(src: Path, target: Path, *, trust_remote_code: bool = False) -> None:
    """verl's FSDP merger on one folder (what ``python -m verl.model_merger merge --backend fsdp`` runs)."""
    from verl.model_merger.base_model_merger import generate_config_from_args
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    if not (src / "huggingface" / "config.json").is_file():
        raise CheckpointError(
            f"{src} has no huggingface/config.json; it is not a complete verl FSDP checkpoint"
        )
    args = argparse.Namespace(
        operation="merge",
        backend="fsdp",
        tie_word_embedding=False,
        trust_remote_code=trust_remote_code,
        is_value_model=False,
        local_dir=str(src),
        use_cpu_initialization=False,
        target_dir=str(target),
        hf_upload_path=None,
        private=False,
    )
    merger = FSDPModelMerger(generate_config_from_args(args))
    merger.merge_and_save()
    merger.cleanup()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m metaagent.train.verl_backend.convert",
        description="Convert a verl-backend checkpoint (FSDP shards) to Hugging Face model folders.",
    )
    p.add_argument("checkpoint", type=Path, help="RUN/checkpoints/step_XXXXXXXX, or one verl FSDP folder")
    p.add_argument("out", type=Path, help="output folder (OUT/<key>/ per model when there are several)")
    p.add_argument(
        "--model", help="convert only this physical model (policy, designer, executor, role0, ...)"
    )
    p.add_argument("--trust-remote-code", action="store_true", help="for model classes outside transformers")
    args = p.parse_args(argv)
    try:
        srcs = sources(args.checkpoint, args.model)
        for key, target in targets(srcs, args.out).items():
            target.mkdir(parents=True, exist_ok=True)
            merge(srcs[key], target, trust_remote_code=args.trust_remote_code)
            print(f"{key}: {srcs[key]} -> {target}")
    except CheckpointError as e:
        print(f"convert: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
