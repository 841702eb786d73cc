"""``manifest.json`` of a distillation directory: what was made, how, from what, and at what cost.

Rewritten atomically after every finished task, so it is current even after a kill. Counts cover the whole
directory (earlier invocations included): they are read from the files once when the run starts and then
updated with each committed task. Each invocation appends one entry to ``runs`` with its command, time
span, tasks and the tokens its policy spent; ``tokens`` is their sum. File hashes are written at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .examples import DESIGNER, EXECUTOR
from .store import DONE_FILE, EXAMPLE_FILES, MANIFEST_FILE, ExampleStore

if TYPE_CHECKING:
    from .config import DistillConfig

FORMAT = 1
TOKEN_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _file_info(path: Path, *, digest: bool) -> dict[str, Any]:
    if not path.exists():
        return {"bytes": 0}
    info: dict[str, Any] = {"bytes": path.stat().st_size}
    if digest:
        data = path.read_bytes()
        info.update(lines=data.count(b"\n"), sha256=hashlib.sha256(data).hexdigest())
    return info


def agent_prompts(example: dict[str, Any]) -> list[str]:
    """System prompts of the agents in a designer example's script."""
    from metaagent.workflow import analyze_script, extract_script

    script = extract_script(example["messages"][-1]["content"])
    return list(analyze_script(script).get("system_prompts") or []) if script else []


@dataclass
class ExampleStats:
    """Tallies of one example file, updated as examples are added."""

    count: int = 0
    by_domain: Counter = field(default_factory=Counter)
    by_structure: Counter = field(default_factory=Counter)
    shown: Counter = field(default_factory=Counter)
    used: Counter = field(default_factory=Counter)
    prompts: Counter = field(default_factory=Counter)  # designer: agent system prompts in the scripts

    def add(self, examples: Iterable[dict[str, Any]], *, designer: bool) -> None:
        for ex in examples:
            self.count += 1
            self.by_domain[str(ex.get("domain"))] += 1
            self.by_structure[str(ex.get("structure"))] += 1
            if designer:
                self.shown.update(ex.get("templates_shown") or [])
                if ex.get("template"):
                    self.used[str(ex["template"])] += 1
                self.prompts.update(agent_prompts(ex))

    def uniqueness(self) -> dict[str, Any]:
        """Agents in the kept scripts and the fraction whose system prompt occurs exactly once
        (the paper reports 77.5% byte-unique agent prompts for its distilled designs)."""
        agents = sum(self.prompts.values())
        unique = sum(1 for n in self.prompts.values() if n == 1)
        return {
            "agents": agents,
            "distinct_prompts": len(self.prompts),
            "byte_unique_fraction": round(unique / agents, 4) if agents else None,
        }


def _sorted(c: Counter) -> dict[str, int]:
    return dict(sorted(c.items()))


@dataclass
class RunTotals:
    """Running totals over the whole output directory (earlier invocations included)."""

    tasks_total: int = 0
    tasks_done: int = 0
    tasks_failed: int = 0
    scored: int = 0
    correct: int = 0
    designer: int = 0
    executor: int = 0
    tokens: int = 0

    @property
    def acceptance(self) -> float | None:
        return self.correct / self.scored if self.scored else None


class ManifestWriter:
    """Keeps ``manifest.json`` and the running totals of one invocation."""

    def __init__(self, store: ExampleStore, config: DistillConfig, *, policy_id: str = "") -> None:
        self.store = store
        self.config = config
        self.policy_id = policy_id
        self.path = store.path(MANIFEST_FILE)
        self.previous_runs: list[dict[str, Any]] = []
        if self.path.exists():
            try:
                self.previous_runs = list(json.loads(self.path.read_text(encoding="utf-8")).get("runs") or [])
            except (OSError, json.JSONDecodeError):
                self.previous_runs = []  # counts are rebuilt from the files; only earlier token counts are lost
        self.stats = {kind: ExampleStats() for kind in EXAMPLE_FILES}
        for kind in EXAMPLE_FILES:
            self.stats[kind].add(store.examples(kind), designer=kind == DESIGNER)
        self.run: dict[str, Any] = {}
        self.tokens_at_start: dict[str, int] = {}
        self.totals: RunTotals | None = None

    # ---- events -------------------------------------------------------------------------------------------

    def start(self, *, tasks_total: int, tokens_now: Callable[[], dict[str, int]]) -> RunTotals:
        self.tokens_at_start = dict(tokens_now())
        self.run = {
            "command": self.config.command,
            "started_at": time.time(),
            "ended_at": None,
            "tasks": 0,
            "tokens": {k: 0 for k in TOKEN_KEYS},
            "repair": {
                "torn_lines": self.store.repair.torn_lines,
                "orphan_lines": self.store.repair.orphan_lines,
            },
        }
        self.totals = RunTotals(tasks_total=tasks_total)
        self._refresh()
        self.write()
        return self.totals

    def task_done(
        self, fresh: dict[str, list[dict[str, Any]]], *, tokens_now: Callable[[], dict[str, int]]
    ) -> None:
        for kind, examples in fresh.items():
            self.stats[kind].add(examples, designer=kind == DESIGNER)
        self.run["tasks"] += 1
        self.run["tokens"] = self._run_tokens(tokens_now)
        self._refresh()
        self.write()

    def finish(self, *, failed: dict[str, str], tokens_now: Callable[[], dict[str, int]]) -> dict[str, Any]:
        self.run["ended_at"] = time.time()
        self.run["failed"] = dict(failed)
        self.run["tokens"] = self._run_tokens(tokens_now)
        self._refresh()
        return self.write(digest=True)

    # ---- content ------------------------------------------------------------------------------------------

    def _run_tokens(self, tokens_now: Callable[[], dict[str, int]]) -> dict[str, int]:
        now = tokens_now()
        return {k: int(now.get(k, 0)) - int(self.tokens_at_start.get(k, 0)) for k in TOKEN_KEYS}

    def _runs(self) -> list[dict[str, Any]]:
        return [*self.previous_runs, self.run] if self.run else list(self.previous_runs)

    def _done_total(self, key: str) -> int:
        return sum(int(r.get(key) or 0) for r in self.store.done.values())

    def _refresh(self) -> None:
        t = self.totals
        if t is None:
            return
        t.tasks_done = len(self.store.done)
        t.scored, t.correct = self._done_total("scored"), self._done_total("correct")
        t.designer, t.executor = self.stats[DESIGNER].count, self.stats[EXECUTOR].count
        t.tokens = sum(int((r.get("tokens") or {}).get("total_tokens", 0)) for r in self._runs())

    def build(self, *, digest: bool = False) -> dict[str, Any]:
        cfg, d, e = self.config, self.stats[DESIGNER], self.stats[EXECUTOR]
        done = list(self.store.done.values())
        total = self._done_total
        scored, valid = total("scored"), total("valid_designs")
        out: dict[str, Any] = {
            "format": FORMAT,
            "updated_at": time.time(),
            "mode": "template-only" if cfg.template_only else "teacher",
            "command": cfg.command,
            "seed": cfg.seed,
            "config": cfg.describe(),
            "tasks": {
                "total": self.totals.tasks_total if self.totals else None,
                "done": len(done),
                "by_domain": _sorted(Counter(str(r.get("domain")) for r in done)),
            },
            "counts": {
                DESIGNER: d.count,
                EXECUTOR: e.count,
                "by_domain": {DESIGNER: _sorted(d.by_domain), EXECUTOR: _sorted(e.by_domain)},
                "by_structure": {DESIGNER: _sorted(d.by_structure), EXECUTOR: _sorted(e.by_structure)},
                "duplicates_dropped": {k: total(f"kept_{k}_dup") for k in EXAMPLE_FILES},
            },
            "templates": {
                "shown_in_kept_prompts": _sorted(d.shown),
                "used_in_kept_replies": _sorted(d.used),
                "used_in_all_designs": _sorted(
                    Counter(n for r in done for n in r.get("templates_used") or [])
                ),
            },
            "acceptance": {
                "designs": total("designs"),
                "valid_designs": valid,
                "accepted_designs": total("accepted_designs"),
                "executions": total("executions"),
                "scored_executions": scored,
                "correct_executions": total("correct"),
                "unscored_executions": total("unscored"),
                "execution_rate": round(total("correct") / scored, 4) if scored else None,
                "design_rate": round(total("accepted_designs") / valid, 4) if valid else None,
            },
            "agent_prompts": d.uniqueness(),
            "tokens": {
                k: sum(int((r.get("tokens") or {}).get(k, 0)) for r in self._runs()) for k in TOKEN_KEYS
            },
            "runs": self._runs(),
            "files": {
                n: _file_info(self.store.path(n), digest=digest) for n in (*EXAMPLE_FILES.values(), DONE_FILE)
            },
        }
        if cfg.template_only:
            out["executor_model"] = self.policy_id or cfg.executor_model
        else:
            out["teacher"] = {
                "base_url": cfg.teacher.base_url,
                "model": cfg.teacher.model,
                "api_key_env": cfg.teacher.api_key_env,
            }
        return out

    def write(self, *, digest: bool = False) -> dict[str, Any]:
        data = self.build(digest=digest)
        _write_atomic(self.path, data)
        return data
