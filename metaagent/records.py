"""Versioned rollout records: the contract between rollout, credit, trainer, replay, distillation and serving.

One :class:`RolloutTree` per task and rollout, one tree per JSONL line::

    RolloutTree (task, seed, config, models)
    └── Design i  (designer sample: prompt/response ids, log-probs; extracted script; check report; structure)
        └── Execution j  (status, answer, reward components)
            ├── AgentTurn k  (role, role_turn, batch, messages, response, ids, log-probs, parents,
            │                 per-turn reward, labels, advantage, synthetic)
            ├── ToolCall    (name, args, result)
            ├── TurnGroup   (the K candidates of one call, the selected one, each candidate's reward)
            ├── Counterfactual (a re-run with some agents replaced by a baseline)
            ├── FirstError  (the first erroneous turn and the judge queries that found it)
            └── PreferencePair (chosen vs rejected reply for one context)

Schema v2 (this version) adds the per-turn fields, candidate groups, counterfactual runs, first-error
markers and preference pairs: the ground of per-turn credit (AT-GRPO, MAPPA, UnityMAS-O, evaluation-aligned
credit). v1 files load through :func:`migrate`.

Everything is plain dataclasses of JSON types, so a tree survives ``json`` unchanged (floats round-trip
exactly) and can be read without importing torch or the trainer. Readers accept older schema versions
through :func:`migrate` and say which version they need for newer ones.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import lzma
import os
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from metaagent.errors import MetaAgentError

SCHEMA_VERSION = 2

EXECUTION_STATUSES = ("ok", "invalid", "error", "timeout", "limit")
TURN_REWARD_SOURCES = ("env", "allocator", "judge", "rule")
PREFERENCE_SOURCES = ("resample", "teacher", "success_episode")

#: the two logical roles; an executor agent's route name is ``executor:<agent role name>``
DESIGNER = "designer"
EXECUTOR = "executor"
ROLES = (DESIGNER, EXECUTOR)


class SchemaError(MetaAgentError, ValueError):
    """A record cannot be read: malformed, or written by a newer schema than this package knows."""


class _Record:
    """Mixin: ``to_dict`` / ``from_dict`` for dataclasses with nested record fields.

    ``_nested`` maps a field name to the record class of its value (or of each list item).
    """

    _nested: ClassVar[dict[str, type]] = {}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        if not isinstance(data, Mapping):
            raise SchemaError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        kwargs = {}
        for key, value in data.items():
            if key not in names:
                continue  # fields added by newer minor writers are ignored, not fatal
            sub = cls._nested.get(key)
            if sub is not None and value is not None:
                value = [sub.from_dict(v) for v in value] if isinstance(value, list) else sub.from_dict(value)
            kwargs[key] = value
        try:
            return cls(**kwargs)
        except TypeError as e:
            raise SchemaError(f"{cls.__name__}: {e}") from None


@dataclass
class Diagnostic(_Record):
    """One refusal or warning of the script checker. ``code`` is stable (e.g. ``E-DUNDER``)."""

    line: int
    col: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}, col {self.col}: [{self.code}] {self.message}"


@dataclass
class CheckReport(_Record):
    """Result of checking a designer script: ``ok`` iff there are no errors."""

    ok: bool
    errors: list[Diagnostic] = field(default_factory=list)
    warnings: list[Diagnostic] = field(default_factory=list)
    _nested: ClassVar[dict[str, type]] = {"errors": Diagnostic, "warnings": Diagnostic}


@dataclass
class TurnReward(_Record):
    """The reward of one agent turn (or candidate). ``total`` None with ``error`` set = not computable:
    counted, excluded, never 0. ``source``: ``env`` (at call time), ``allocator`` (split of the execution's
    reward), ``judge`` (a model's score), ``rule``."""

    total: float | None
    source: str
    components: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in TURN_REWARD_SOURCES:
            raise SchemaError(f"TurnReward.source must be one of {TURN_REWARD_SOURCES}, got {self.source!r}")
        if self.total is None and not self.error:
            raise SchemaError("TurnReward.total is None: set error to say why it could not be computed")


@dataclass
class AgentTurn(_Record):
    """One agent call inside an execution: an executor training sample (prompt_ids -> response_ids)."""

    index: int  # position within the execution, in completion order
    role: str  # the agent's role name in the script, e.g. "AlgebraSolver"
    system_prompt: str
    messages: list[dict[str, str]]  # exactly the chat messages sent to the model
    response: str
    delivery: str | None  # content of <delivery>...</delivery>, None when the block is missing
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str
    model: str
    parents: list[int] = field(default_factory=list)  # earlier turns whose output appears in this prompt
    elapsed_s: float = 0.0
    temperature: float | None = None  # sampling temperature (0 = greedy); the log-probs are of this distribution
    # ---- schema v2 ----
    call_index: int = -1  # position in call order (its sampling seed is call_seed(execution seed, call_index))
    role_turn: int = 0  # the k-th call of this role name in the execution (0-based): AT-GRPO's turn t
    batch: int = -1  # which script message the call came in (calls of one parallel([...]) share it)
    reward: TurnReward | None = None  # per-turn reward, if a turn-reward source or allocator ran
    labels: dict[str, float] = field(default_factory=dict)  # e.g. {"helpful": 1.0} from a judge
    advantage: float | None = None  # per-turn advantage written by credit assignment (None: the execution's)
    synthetic: bool = False  # a reply no trainable policy sampled (forced prefix, baseline): never a sample
    _nested: ClassVar[dict[str, type]] = {"reward": TurnReward}

    def __post_init__(self) -> None:
        if self.call_index < 0:
            self.call_index = self.index

    @property
    def node_id(self) -> str:
        """The turn's id in the execution's turn graph (``parents`` are the ids of earlier turns)."""
        return f"t{self.index}"


@dataclass
class TurnGroup(_Record):
    """The K candidates of one agent call (tree sampling): every candidate with its ids and log-probs,
    the one the execution continued with, and each candidate's reward (None: not computable)."""

    key: str  # (execution, role, role_turn) as text: groups are keyed per agent and turn
    role: str
    role_turn: int
    call_index: int
    candidates: list[AgentTurn]
    selected: int
    rewards: list[float | None]
    advantages: list[float | None] = field(default_factory=list)  # written by credit assignment
    _nested: ClassVar[dict[str, type]] = {"candidates": AgentTurn}

    def __post_init__(self) -> None:
        if len(self.rewards) != len(self.candidates) or not 0 <= self.selected < len(self.candidates):
            raise SchemaError(
                f"TurnGroup {self.key!r}: {len(self.candidates)} candidates need as many rewards (got "
                f"{len(self.rewards)}) and a selected index in range (got {self.selected})"
            )


@dataclass
class FirstError(_Record):
    """The first erroneous turn t* (1-based) of a failed execution, and the judge queries that found it."""

    turn: int
    role: str
    queries: list[dict[str, Any]] = field(default_factory=list)  # [{"turn": t, "verdict": "OK" | "ERR"}]
    judge: str = ""


@dataclass
class PreferencePair(_Record):
    """A chosen and a rejected reply to one context (the DPO loss's unit)."""

    turn: int  # the turn (0-based index) whose reply is the rejected side
    messages: list[dict[str, str]]
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    source: str  # one of PREFERENCE_SOURCES
    weight: float = 1.0
    chosen_logprobs: list[float] | None = None

    def __post_init__(self) -> None:
        if self.source not in PREFERENCE_SOURCES:
            raise SchemaError(f"PreferencePair.source must be one of {PREFERENCE_SOURCES}, got {self.source!r}")


@dataclass
class ToolCall(_Record):
    """A tool used by the script (e.g. running a candidate program on the public tests)."""

    index: int
    name: str
    args: dict[str, Any]
    result: str
    ok: bool
    after_turn: int  # number of agent turns completed before the call
    elapsed_s: float = 0.0


@dataclass
class ScriptError(_Record):
    type: str  # exception class name or a limit name
    message: str
    line: int | None = None


@dataclass
class RewardRecord(_Record):
    """Reward of one execution. ``total = correct + lam * format`` when computable; ``error`` otherwise.

    A reward that could not be computed is never a silent 0: ``total`` is None and ``error`` says why.
    """

    total: float | None
    correct: float | None
    format: float | None
    components: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Counterfactual(_Record):
    """A re-execution of the same script with the agents outside ``members`` answered by a baseline."""

    members: list[str]  # role names that kept their policy
    baseline: str  # noop | mask | reference | forced:<k> / resample:<t> (prefix-judge runs) | correction:<t>
    seed: int | None
    status: str
    reward: RewardRecord | None = None
    n_calls: int = 0
    turns: list[AgentTurn] = field(default_factory=list)
    _nested: ClassVar[dict[str, type]] = {"turns": AgentTurn, "reward": RewardRecord}


@dataclass
class Execution(_Record):
    """One run of a design's script by the executor policy."""

    index: int
    status: str  # one of EXECUTION_STATUSES
    answer: str | None = None
    submitted: bool = False
    turns: list[AgentTurn] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    error: ScriptError | None = None
    elapsed_s: float = 0.0
    seed: int | None = None
    reward: RewardRecord | None = None
    advantage: float | None = None  # executor advantage, filled by credit assignment
    # ---- schema v2 ----
    groups: list[TurnGroup] = field(default_factory=list)  # candidate groups (tree sampling); turns = executed path
    counterfactuals: list[Counterfactual] = field(default_factory=list)
    first_error: FirstError | None = None
    preferences: list[PreferencePair] = field(default_factory=list)
    # the executed workflow graph (UnityMAS-O Eq. 5-6): {"nodes": [...], "edges": [...]}, see turn_graph
    graph: dict[str, Any] | None = None
    node: str | None = None  # the Ray node id that ran it (rollout.ray_address); None: this machine's sandbox pool
    _nested: ClassVar[dict[str, type]] = {
        "turns": AgentTurn,
        "tool_calls": ToolCall,
        "error": ScriptError,
        "reward": RewardRecord,
        "groups": TurnGroup,
        "counterfactuals": Counterfactual,
        "first_error": FirstError,
        "preferences": PreferencePair,
    }

    def __post_init__(self) -> None:
        if self.status not in EXECUTION_STATUSES:
            raise SchemaError(f"Execution.status must be one of {EXECUTION_STATUSES}, got {self.status!r}")


@dataclass
class DesignerSample(_Record):
    """The designer's generation: a designer training sample (prompt_ids -> response_ids)."""

    messages: list[dict[str, str]]
    text: str
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str
    model: str
    templates: list[str] = field(default_factory=list)  # names of in-context templates shown
    elapsed_s: float = 0.0
    temperature: float | None = None  # sampling temperature (0 = greedy); the log-probs are of this distribution


@dataclass
class Design(_Record):
    """One sampled (or frozen) workflow design and its N executions."""

    index: int
    source: str  # "designer", or "frozen:<template name or file>" for fixed multi-agent systems
    sample: DesignerSample | None  # None for frozen designs: nothing to train
    script: str | None  # extracted script; None when nothing could be extracted
    check: CheckReport
    structure: dict[str, Any] | None = None  # workflow.analysis output
    executions: list[Execution] = field(default_factory=list)
    reward: float | None = None  # Eq. 4: mean execution reward; 0 for invalid designs (this project's choice)
    advantage: float | None = None  # designer advantage, filled by credit assignment
    _nested: ClassVar[dict[str, type]] = {
        "sample": DesignerSample,
        "check": CheckReport,
        "executions": Execution,
    }

    @property
    def valid(self) -> bool:
        return self.check.ok and self.script is not None


@dataclass
class Control(_Record):
    """The budget-matched single-agent control of one question (``algo.designer_baseline: control``; the
    equations are in docs/concepts/credit.md): ``K`` executions of the task domain's single-agent script (eval's
    ``sa``), where ``K`` is the largest budget any design of the tree needs. The control at budget ``k <= K`` is
    the one execution that ``select`` keeps among the first ``k`` (:func:`metaagent.rewards.selection.choose` of
    ``marks[:k]``), so every design of the question shares this one run. Every turn of these executions is
    ``synthetic``: recorded and replayable, never a training sample."""

    script: str  # the single-agent script that ran (Domain.solo_script)
    select: str  # the selection rule (metaagent.rewards.selection.SELECTION_RULES): majority | public_tests
    # per execution: its vote key (majority; None: no answer) or whether its program passed the public tests
    # (public_tests; None: the tests could not be run)
    marks: list[Any] = field(default_factory=list)
    executions: list[Execution] = field(default_factory=list)
    source: str = "control:sa"
    _nested: ClassVar[dict[str, type]] = {"executions": Execution}

    def __post_init__(self) -> None:
        if len(self.marks) != len(self.executions):
            raise SchemaError(
                f"Control: {len(self.executions)} executions need one selection mark each (got {len(self.marks)})"
            )


@dataclass
class RolloutTree(_Record):
    """All designs and executions of one task in one rollout, with what is needed to replay it."""

    run_id: str
    task: dict[str, Any]  # metaagent.data.Task.to_dict()
    seed: int
    config: dict[str, Any]
    models: dict[str, str]  # logical role -> model id
    designs: list[Design] = field(default_factory=list)
    step: int | None = None
    mode: str = "train"  # train | eval | fixed | serve | distill
    timings: dict[str, float] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    schema_version: int = SCHEMA_VERSION
    config_hash: str = ""
    # the designer prompt's budget tag (metaagent.rollout.budget.BUDGET_TAGS); None: no tag shown
    budget: str | None = None
    control: Control | None = None  # the budget-matched single-agent control (algo.designer_baseline: control)
    _nested: ClassVar[dict[str, type]] = {"designs": Design, "control": Control}

    def __post_init__(self) -> None:
        if not self.config_hash:
            self.config_hash = config_hash(self.config)

    @property
    def task_id(self) -> str:
        return str(self.task.get("id"))

    def executions(self) -> Iterator[tuple[Design, Execution]]:
        for d in self.designs:
            for e in d.executions:
                yield d, e

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> RolloutTree:
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise SchemaError(f"not valid JSON: {e}") from None
        return cls.from_dict(migrate(data))


GRAPH_EDGE_KINDS = ("data", "order")
_MIN_SHARED_CHARS = 8  # shorter texts are too common to show that one node read another


def turn_graph(turns: Sequence[AgentTurn], tool_calls: Sequence[ToolCall] = ()) -> dict[str, Any]:
    """The executed workflow graph of one execution: nodes are the agent turns (``t<index>``, with role,
    ``role_turn`` and ``batch``) and tool calls (``x<index>``); edges ``{"src", "dst", "kind"}``:

    - ``data``: turn -> turn from ``AgentTurn.parents`` (the earlier turns whose output is in the prompt);
      turn -> tool when the turn's delivered text is in the call's arguments; tool -> turn when the call's
      result is in the turn's messages;
    - ``order``: a tool call with no data input follows the last turn before it.

    Data edges are text containment, as ``parents`` is: a reconstruction, not instrumentation.
    """
    nodes: list[dict[str, Any]] = [
        {"id": f"t{t.index}", "kind": "agent", "role": t.role, "role_turn": t.role_turn, "batch": t.batch}
        for t in turns
    ]
    edges: list[dict[str, str]] = []
    for t in turns:
        edges += [{"src": f"t{p}", "dst": f"t{t.index}", "kind": "data"} for p in t.parents]
    for c in tool_calls:
        nodes.append({"id": f"x{c.index}", "kind": "tool", "role": c.name, "ok": c.ok, "after_turn": c.after_turn})
        args = " ".join(str(v) for v in c.args.values())
        inputs = []
        for t in turns[: c.after_turn]:
            out = (t.delivery if t.delivery is not None else t.response).strip()
            if len(out) >= _MIN_SHARED_CHARS and out in args:
                inputs.append(t)
        edges += [{"src": f"t{t.index}", "dst": f"x{c.index}", "kind": "data"} for t in inputs]
        if not inputs and c.after_turn > 0:
            edges.append({"src": f"t{turns[c.after_turn - 1].index}", "dst": f"x{c.index}", "kind": "order"})
        result = c.result.strip()
        if len(result) >= _MIN_SHARED_CHARS:
            probe = result[:200]
            for t in turns[c.after_turn :]:
                if any(probe in str(m.get("content", "")) for m in t.messages):
                    edges.append({"src": f"x{c.index}", "dst": f"t{t.index}", "kind": "data"})
    return {"nodes": nodes, "edges": edges}


def execution_graph(execution: Execution) -> dict[str, Any]:
    """The recorded graph of ``execution``, or the one rebuilt from its turns (records written before it)."""
    return execution.graph if execution.graph is not None else turn_graph(execution.turns, execution.tool_calls)


def config_hash(config: Mapping[str, Any]) -> str:
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# ---- schema versions -------------------------------------------------------------------------------------

def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """v2 adds per-turn fields (defaults: no reward, no labels, no advantage, sampled) and derives
    ``call_index`` (= index) and ``role_turn`` (earlier calls of the same role) from the v1 turn order."""
    for design in data.get("designs") or []:
        for execution in design.get("executions") or []:
            seen: dict[str, int] = {}
            for turn in execution.get("turns") or []:
                turn.setdefault("call_index", turn.get("index", -1))
                role = turn.get("role", "")
                turn.setdefault("role_turn", seen.get(role, 0))
                seen[role] = seen.get(role, 0) + 1
    return {**data, "schema_version": 2}


#: migrations[v] turns a version-v dict into a version-(v+1) dict
_MIGRATIONS: dict[int, Any] = {1: _v1_to_v2}


def migrate(data: Any) -> dict[str, Any]:
    """Bring a tree dict written by an older schema to :data:`SCHEMA_VERSION`."""
    if not isinstance(data, dict):
        raise SchemaError(f"a rollout tree must be a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if not isinstance(version, int):
        raise SchemaError("record has no integer 'schema_version'; it was not written by metaagent")
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"record has schema_version {version} but this metaagent reads up to {SCHEMA_VERSION}; "
            "upgrade metaagent to read it"
        )
    while version < SCHEMA_VERSION:
        if version not in _MIGRATIONS:
            raise SchemaError(f"no migration from schema_version {version}; it needs metaagent reading v{version}")
        data = _MIGRATIONS[version](data)
        version = data["schema_version"]
    return data


# ---- JSONL files ------------------------------------------------------------------------------------------

#: compressed record files (``.jsonl.xz``, ``.jsonl.gz``), read like plain JSONL: committed results keep their
#: raw records compressed (``scripts/compress_records.py``); a writer that appends to one first turns it back
#: into plain JSONL (:func:`decompress`)
COMPRESSORS = {".xz": lzma.open, ".gz": gzip.open}
RECORD_SUFFIX = ".jsonl"
RECORD_SUFFIXES = (RECORD_SUFFIX, *(RECORD_SUFFIX + ext for ext in COMPRESSORS))


def is_record_file(path: str | os.PathLike[str]) -> bool:
    """Whether the name is a rollout record file's: ``*.jsonl``, ``*.jsonl.xz`` or ``*.jsonl.gz``."""
    return str(path).endswith(RECORD_SUFFIXES)


def record_stem(path: str | os.PathLike[str]) -> str:
    """The file name without its record suffix (``step_000012.jsonl.xz`` -> ``step_000012``)."""
    name = Path(path).name
    for suffix in sorted(RECORD_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def record_file(path: str | os.PathLike[str]) -> Path:
    """``path`` (a ``*.jsonl`` name) if it exists, else its compressed form if that exists, else ``path``."""
    path = Path(path)
    if path.exists() or not path.name.endswith(RECORD_SUFFIX):
        return path
    return next((c for ext in COMPRESSORS if (c := path.with_name(path.name + ext)).exists()), path)


def glob_records(folder: str | os.PathLike[str], pattern: str) -> list[Path]:
    """The record files below ``folder`` that ``pattern`` (a glob ending in ``.jsonl``, e.g.
    ``rollouts/*/*math*/auto.jsonl``) names, plain or compressed alike, sorted by path."""
    if not pattern.endswith(RECORD_SUFFIX):
        raise ValueError(f"record glob {pattern!r} must end in {RECORD_SUFFIX} (compressed files match too)")
    return sorted(p for p in Path(folder).glob(pattern + "*") if is_record_file(p) and p.is_file())


def _compressor(path: Path) -> Any:
    return COMPRESSORS.get(path.suffix) if path.name.endswith(RECORD_SUFFIXES[1:]) else None


def read_record_lines(path: str | os.PathLike[str]) -> tuple[list[str], str | None]:
    """The text lines of a record file, plain or compressed, and why reading stopped early (a compressed file
    cut off: the lines before the cut are returned), else None. ``OSError`` when the file cannot be opened."""
    path = Path(path)
    opener = _compressor(path)
    if opener is None:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readlines(), None
    lines: list[str] = []
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            for line in f:
                lines.append(line)
    except (EOFError, lzma.LZMAError, gzip.BadGzipFile, zlib.error) as e:
        return lines, f"the compressed file is cut off or corrupt after line {len(lines)} ({e})"
    return lines, None


def write_record_lines(path: str | os.PathLike[str], lines: Iterable[str]) -> None:
    """Replace a record file atomically with ``lines`` (each ending in a newline), compressed as its name says."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    opener = _compressor(path)
    with (opener(tmp, "wt", encoding="utf-8") if opener else open(tmp, "w", encoding="utf-8")) as f:
        f.writelines(lines)
    tmp.replace(path)


#: the suffix of every record field that holds sampled tokens' log-probs (AgentTurn.logprobs,
#: DesignerSample.logprobs, PreferencePair.chosen_logprobs)
LOGPROBS_SUFFIX = "logprobs"


def _without_logprobs(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: None if k.endswith(LOGPROBS_SUFFIX) else _without_logprobs(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_without_logprobs(v) for v in data]
    return data


def without_logprobs(line: str) -> str:
    """A record line with every sampled token's log-prob emptied (``null``: "not recorded", which the schema
    allows), checked to read as the same tree but for those."""
    new = json.dumps(_without_logprobs(json.loads(line)), ensure_ascii=False, separators=(",", ":"))
    if RolloutTree.from_json(new).to_dict() != _without_logprobs(RolloutTree.from_json(line).to_dict()):
        raise SchemaError("the tree reads back differently without its log-probs")
    return new + "\n"


def compress(path: str | os.PathLike[str], *, logprobs: bool = True) -> Path:
    """Replace a plain file by ``<name>.xz`` (read back and compared before the plain file is removed; an
    older compressed copy is replaced); returns the compressed path. Used for ``*.jsonl`` record files and,
    as plain bytes, for the metrics and evaluation summaries committed beside them. ``logprobs=False``
    (records only) empties the log-probs on the way (:func:`without_logprobs`): what training needs and
    compresses worst (about two thirds of a compressed evaluation record), read by no table, report or
    replay view."""
    path = Path(path)
    raw = path.read_bytes()
    if not logprobs:
        try:
            lines = [without_logprobs(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
        except ValueError as e:  # SchemaError, or a line that is not JSON
            raise SchemaError(f"{path}: {e}; nothing was changed") from None
        raw = "".join(lines).encode("utf-8")
    target = path.with_name(path.name + ".xz")
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME))
    if lzma.decompress(tmp.read_bytes()) != raw:
        tmp.unlink()
        raise SchemaError(f"{path}: the compressed copy does not read back the same; nothing was changed")
    tmp.replace(target)
    path.unlink()
    return target


def decompress(path: str | os.PathLike[str]) -> Path:
    """Turn a compressed record file into the plain ``*.jsonl`` beside it (removing the compressed one), so
    that trees can be appended; returns the plain path. A plain path is returned as is."""
    path = Path(path)
    if _compressor(path) is None:
        return path
    lines, cut = read_record_lines(path)
    if cut:
        raise SchemaError(f"{path}: {cut}; nothing was changed. Decompress what is readable by hand, or remove it")
    plain = path.with_name(record_stem(path) + RECORD_SUFFIX)
    if plain.exists():
        raise SchemaError(f"{path} and {plain} both exist; keep one of them")
    write_record_lines(plain, lines)
    path.unlink()
    return plain


@dataclass
class BadLine:
    path: str
    line: int
    error: str


class TreeWriter:
    """Write trees to a JSONL file, one per line, flushed and fsync'd per write (safe to tail).

    Appends by default; ``truncate=True`` starts the file afresh (a resumed run rewriting a step). Appending
    to a compressed record file turns it into plain JSONL first (:func:`decompress`).
    """

    def __init__(self, path: str | os.PathLike[str], *, truncate: bool = False) -> None:
        self.path = Path(path)
        if _compressor(self.path) is not None:  # append to committed (compressed) records: plain JSONL again
            if not self.path.exists():
                raise SchemaError(f"{self.path}: records are written as plain {RECORD_SUFFIX}; compress them afterwards")
            self.path = decompress(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w" if truncate else "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, tree: RolloutTree) -> None:
        line = tree.to_json()
        with self._lock:
            self._f.write(line + "\n")
            self._f.flush()
            os.fsync(self._f.fileno())

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.close()

    def __enter__(self) -> TreeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_trees(path: str | os.PathLike[str], trees: Iterable[RolloutTree]) -> None:
    with TreeWriter(path) as w:
        for t in trees:
            w.write(t)


def iter_trees(path: str | os.PathLike[str], bad_lines: list[BadLine] | None = None) -> Iterator[RolloutTree]:
    """Yield the trees of a record file (plain or compressed JSONL), skipping bad lines.

    Bad lines (truncated, corrupt, newer schema; a compressed file cut off) are appended to ``bad_lines`` when
    given; without it they raise :class:`SchemaError` naming the file and line.
    """
    path = Path(path)
    lines, cut = read_record_lines(path)
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield RolloutTree.from_json(line)
        except SchemaError as e:
            if bad_lines is None:
                raise SchemaError(f"{path}:{lineno}: {e}") from None
            bad_lines.append(BadLine(str(path), lineno, str(e)))
    if cut:
        if bad_lines is None:
            raise SchemaError(f"{path}: {cut}")
        bad_lines.append(BadLine(str(path), len(lines) + 1, cut))


def read_trees(path: str | os.PathLike[str]) -> tuple[list[RolloutTree], list[BadLine]]:
    bad: list[BadLine] = []
    trees = list(iter_trees(path, bad))
    return trees, bad


def graph_lines(graph: Mapping[str, Any]) -> list[str]:
    """The graph as text for replay: one line per node with its outgoing edges, e.g.
    ``t1 Coder (round 0) -> x0 run_tests``; ``~>`` marks an order edge."""
    out_edges: dict[str, list[str]] = {}
    for e in graph.get("edges", []):
        out_edges.setdefault(e["src"], []).append(("~> " if e["kind"] == "order" else "-> ") + e["dst"])
    lines = []
    for n in graph.get("nodes", []):
        label = f"{n['id']} {n['role']}" + (f" (round {n['role_turn']})" if n["kind"] == "agent" else " [tool]")
        lines.append(label + (" " + ", ".join(out_edges[n["id"]]) if n["id"] in out_edges else ""))
    return lines
