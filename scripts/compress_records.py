"""Compress the rollout record files below folders (``*.jsonl`` -> ``*.jsonl.xz``), for committed results.

    python scripts/compress_records.py benchmarks/results/eval_embedded [more folders ...] [--check]

Every reader of records (``metaagent-replay``, ``metaagent-eval --report-only``, the benchmarks' reports)
reads ``.jsonl.xz`` as it reads ``.jsonl``; a run that appends to one turns it back into plain JSONL. Only
files that hold rollout trees are compressed (their first line parses as a tree: metrics and other JSONL files
stay as they are); each is read back and compared before the plain file is removed
(:func:`metaagent.records.compress`). ``--check`` lists the files and sizes and changes nothing. xz (LZMA, in
Python's standard library) because gzip leaves the committed results above their 10 MB budget: the committed
records were 46.8 MB as JSONL, 7.1 MB with gzip -9, 4.6 MB with xz -9e.
"""

from __future__ import annotations

import argparse
import lzma
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from metaagent.records import RECORD_SUFFIX, RolloutTree, compress  # noqa: E402


def holds_trees(path: Path) -> bool:
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    try:
        RolloutTree.from_json(first)
    except (TypeError, ValueError):  # SchemaError and json's JSONDecodeError are ValueErrors
        return False
    return True


def record_files(folders: list[Path]) -> list[Path]:
    return [p for folder in folders for p in sorted(folder.rglob(f"*{RECORD_SUFFIX}")) if holds_trees(p)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+", type=Path)
    p.add_argument("--check", action="store_true", help="list the files and sizes, change nothing")
    args = p.parse_args()
    before = after = 0
    for path in record_files(args.folders):
        size = path.stat().st_size
        packed = len(lzma.compress(path.read_bytes(), preset=9 | lzma.PRESET_EXTREME)) if args.check else None
        if not args.check:
            packed = compress(path).stat().st_size
        before, after = before + size, after + packed
        print(f"{size:>10} -> {packed:>9}  {path}")
    print(f"{before:,} bytes -> {after:,} bytes" + (" (--check: nothing changed)" if args.check else ""))


if __name__ == "__main__":
    main()
