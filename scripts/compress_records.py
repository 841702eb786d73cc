"""Compress the rollout record files below folders (``*.jsonl`` -> ``*.jsonl.xz``), for committed results.

    python scripts/compress_records.py benchmarks/results/eval_embedded [more folders ...] [--drop-logprobs]
        [--check]

Every reader of records (``metaagent-replay``, ``metaagent-eval --report-only``, the benchmarks' reports)
reads ``.jsonl.xz`` as it reads ``.jsonl``; a run that appends to one turns it back into plain JSONL. Only
files that hold rollout trees are compressed (their first line parses as a tree: metrics and other JSONL files
stay as they are); each is read back and compared before the plain file is removed
(:func:`metaagent.records.compress`). ``--check`` lists the files and sizes and changes nothing. xz (LZMA, in
Python's standard library) because gzip leaves the committed results above their 10 MB budget: the committed
records were 46.8 MB as JSONL, 7.1 MB with gzip -9, 4.6 MB with xz -9e, 1.5 MB with xz -9e and no log-probs.

``--drop-logprobs`` also empties every sampled token's log-prob (``logprobs: null``: "not recorded") in the
record files below the folders, compressed ones included (:func:`metaagent.records.without_logprobs`): what
training needs and compresses worst; no table, report or replay view of an evaluation reads them.
"""

from __future__ import annotations

import argparse
import lzma
from pathlib import Path

from metaagent.records import (
    RECORD_SUFFIX,
    RolloutTree,
    compress,
    decompress,
    glob_records,
    read_record_lines,
    without_logprobs,
)


def holds_trees(path: Path) -> bool:
    lines, _ = read_record_lines(path)
    try:
        RolloutTree.from_json(lines[0] if lines else "")
    except (TypeError, ValueError):  # SchemaError and json's JSONDecodeError are ValueErrors
        return False
    return True


def record_files(folders: list[Path], *, compressed: bool) -> list[Path]:
    """The files below ``folders`` that hold rollout trees: plain ones, and with ``compressed`` those too."""
    files = [p for folder in folders for p in glob_records(folder, f"**/*{RECORD_SUFFIX}")]
    return [p for p in files if (compressed or p.name.endswith(RECORD_SUFFIX)) and holds_trees(p)]


def packed_size(path: Path, *, logprobs: bool) -> int:
    """The size ``compress`` would give the file, changing nothing."""
    lines, _ = read_record_lines(path)
    text = "".join(lines if logprobs else [without_logprobs(line) for line in lines if line.strip()])
    return len(lzma.compress(text.encode("utf-8"), preset=9 | lzma.PRESET_EXTREME))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+", type=Path)
    p.add_argument(
        "--drop-logprobs", action="store_true", help="also empty the log-probs, compressed files included"
    )
    p.add_argument("--check", action="store_true", help="list the files and sizes, change nothing")
    args = p.parse_args()
    keep = not args.drop_logprobs
    before = after = 0
    for path in record_files(args.folders, compressed=args.drop_logprobs):
        size = path.stat().st_size
        if args.check:
            packed = packed_size(path, logprobs=keep)
        else:
            packed = compress(decompress(path), logprobs=keep).stat().st_size
        before, after = before + size, after + packed
        print(f"{size:>10} -> {packed:>9}  {path}")
    print(f"{before:,} bytes -> {after:,} bytes" + (" (--check: nothing changed)" if args.check else ""))


if __name__ == "__main__":
    main()
