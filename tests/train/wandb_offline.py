"""Read the metric history of an offline wandb run back from its ``run-<id>.wandb`` file.

wandb writes an offline run as a LevelDB-style log of protobuf ``Record`` messages: a 7-byte file header
(``:W&B``, magic 0xBEE1, version 0), then 32 KiB blocks of chunks, each with a 7-byte header (CRC32, length
uint16 little-endian, type 1 full / 2 first / 3 middle / 4 last); a block's tail shorter than a header is
zero padding. wandb 0.31 ships no Python reader of it, so the tests parse it here.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32768
HEADER = 7


def records(path: Path):
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", data[:7]
    pos, buf = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if length == 0 and kind == 0:  # padding
            pos += left
            continue
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec
            buf = b""


def history(run_dir: Path) -> list[dict]:
    """The rows wandb.log wrote (``_step`` included), in order, from the one offline run under ``run_dir``."""
    (path,) = Path(run_dir).rglob("run-*.wandb")
    rows = []
    for rec in records(path):
        if rec.WhichOneof("record_type") == "history":
            row = {}
            for item in rec.history.item:
                key = item.key or "/".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            rows.append(row)
    return rows


def config(run_dir: Path) -> dict:
    (path,) = Path(run_dir).rglob("run-*.wandb")
    out: dict = {}
    for rec in records(path):
        kind = rec.WhichOneof("record_type")
        items = rec.config.update if kind == "config" else rec.run.config.update if kind == "run" else []
        for item in items:
            out[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return out
