"""Compressed record files (``.jsonl.xz``, ``.jsonl.gz``) read like plain JSONL; appending makes them plain."""

from __future__ import annotations

import dataclasses
import gzip
import lzma

import pytest
from builders import mixed_trees

from metaagent.records import (
    SchemaError,
    TreeWriter,
    compress,
    decompress,
    glob_records,
    is_record_file,
    read_trees,
    record_file,
    record_stem,
    write_record_lines,
    write_trees,
)
from metaagent.replay import load_run, stats
from metaagent.replay.run import file_step


@pytest.fixture
def plain(tmp_path):
    path = tmp_path / "rollouts" / "step_000007.jsonl"
    write_trees(path, mixed_trees())
    return path


def test_compress_reads_back_the_same_trees_and_replay_finds_the_file(plain):
    trees, _ = read_trees(plain)
    raw = plain.read_bytes()
    packed = compress(plain)
    assert packed.name == "step_000007.jsonl.xz" and not plain.exists()
    assert lzma.decompress(packed.read_bytes()) == raw and packed.stat().st_size < len(raw)
    assert read_trees(packed) == (trees, [])
    assert record_file(plain) == packed  # the plain name resolves to the compressed file
    run = load_run(plain.parent.parent)
    assert run.files == [packed] and [r.tree for r in run.refs] == trees
    assert file_step(packed) == 7 and load_run(packed, steps=[6]).refs == []  # the step in its name selects it
    assert is_record_file(packed) and record_stem(packed) == "step_000007"


def test_gzip_records_read_too(plain):
    trees, _ = read_trees(plain)
    gz = plain.with_name(plain.name + ".gz")
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    assert read_trees(gz) == (trees, [])


def test_a_cut_compressed_file_keeps_its_readable_lines_and_reports_the_cut(plain):
    trees, _ = read_trees(plain)
    packed = compress(plain)
    data = packed.read_bytes()
    packed.write_bytes(data[: len(data) * 3 // 4])
    got, bad = read_trees(packed)
    assert got == trees[: len(got)] and len(got) < len(trees)
    assert len(bad) >= 1 and "cut off" in bad[-1].error
    run = load_run(packed)
    assert run.bad_lines and "cut off" in run.bad_lines[-1].error  # replay reports it, not fatal
    with pytest.raises(SchemaError, match="cut off"):
        decompress(packed)  # nothing is thrown away silently


def test_appending_to_compressed_records_makes_them_plain_again(plain):
    trees, _ = read_trees(plain)
    packed = compress(plain)
    with TreeWriter(packed) as w:
        w.write(trees[0])
    assert not packed.exists() and plain.exists()
    assert read_trees(plain) == (trees + trees[:1], [])
    with pytest.raises(SchemaError, match="written as plain"):
        TreeWriter(plain.with_name("new.jsonl.xz"))


def test_rewriting_a_compressed_file_keeps_it_compressed(plain):
    trees, _ = read_trees(plain)
    packed = compress(plain)
    write_record_lines(packed, [trees[1].to_json() + "\n"])
    assert lzma.decompress(packed.read_bytes()).count(b"\n") == 1
    assert read_trees(packed) == ([trees[1]], [])


def test_glob_records_finds_plain_and_compressed_files_alike(plain):
    folder = plain.parent
    packed = compress(plain)
    gz = folder / "step_000008.jsonl.gz"
    gz.write_bytes(gzip.compress(lzma.decompress(packed.read_bytes())))
    write_trees(folder / "step_000009.jsonl", mixed_trees())
    (folder / "step_000010.jsonl.tmp").write_text("")  # a writer's temporary file is no record
    (folder / "metrics.json").write_text("{}")
    got = glob_records(folder.parent, "rollouts/step_*.jsonl")
    assert [p.name for p in got] == ["step_000007.jsonl.xz", "step_000008.jsonl.gz", "step_000009.jsonl"]
    assert glob_records(folder, "**/*.jsonl") == got
    with pytest.raises(ValueError, match="must end in .jsonl"):
        glob_records(folder, "step_*")


@pytest.mark.parametrize("ext", [".xz", ".gz"])
def test_replay_reads_a_compressed_run_as_it_reads_the_plain_one(plain, ext):
    run_dir = plain.parent.parent
    want = load_run(run_dir)
    if ext == ".xz":
        packed = compress(plain)
    else:
        packed = plain.with_name(plain.name + ext)
        packed.write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()
    got = load_run(run_dir)
    assert got.files == [packed] and not got.bad_lines
    assert [r.tree for r in got.refs] == [r.tree for r in want.refs]
    assert stats(got) == stats(want)


def test_compress_without_logprobs_keeps_everything_else(plain):
    trees, _ = read_trees(plain)
    assert any(t.logprobs for tree in trees for _, e in tree.executions() for t in e.turns)
    assert any(d.sample and d.sample.logprobs for tree in trees for d in tree.designs)
    with_lp = len(lzma.compress(plain.read_bytes(), preset=9 | lzma.PRESET_EXTREME))
    packed = compress(plain, logprobs=False)
    got, bad = read_trees(packed)
    assert not bad and packed.stat().st_size < with_lp
    for old, new in zip(trees, got, strict=True):
        turns = [t for _, e in new.executions() for t in e.turns]
        assert turns and all(t.logprobs is None for t in turns)
        assert all(d.sample is None or d.sample.logprobs is None for d in new.designs)
        for (_, e_old), (_, e_new) in zip(old.executions(), new.executions(), strict=True):
            assert [dataclasses.replace(t, logprobs=None) for t in e_old.turns] == e_new.turns
        assert new.to_json().count('"logprobs":null') > 0 and old.task == new.task


def test_compress_without_logprobs_refuses_a_file_that_is_not_records(tmp_path):
    bad = tmp_path / "notes.jsonl"
    bad.write_text('{"step": 1}\n')
    with pytest.raises(SchemaError, match="notes.jsonl.*nothing was changed"):
        compress(bad, logprobs=False)
    assert bad.exists() and not list(tmp_path.glob("*.xz*"))
