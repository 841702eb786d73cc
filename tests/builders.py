"""Shared test builders: a tiny random Llama, token-carrying rollout trees and samples, a local HTTP stub, an
installed plugin distribution (its entry points), and the benchmarks/ scripts loaded or run as the drivers' tests
need them (with the reduced structure matrix they read).

Every test folder imports it as ``from builders import ...`` (``tests/`` is on ``sys.path`` through the
root ``conftest.py``); no test imports a ``conftest`` module, so no two folders' helpers can shadow each
other.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from metaagent.lazy import import_file
from metaagent.records import (
    AgentTurn,
    CheckReport,
    Control,
    Design,
    DesignerSample,
    Execution,
    RewardRecord,
    RolloutTree,
)

#: headless browsers the rendering tests look for, in this order
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: flags of a headless run that touches nothing outside the page (no network services, no first-run UI)
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium() -> str | None:
    """The first headless browser on PATH, or None (tests that render pages skip then)."""
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


def run_chromium(profile: Path, *args: str, what: str, timeout_s: float = 120) -> tuple[bytes, bytes]:
    """Run the headless browser with ``args`` in a fresh ``profile`` folder; its (stdout, stderr). A run past
    ``timeout_s`` kills the browser's whole process group and fails the test, naming ``what`` it was doing."""
    import pytest

    argv = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"chromium did not {what} within {timeout_s:.0f} s")


VOCAB = 61
PAD = 0
#: what a loaded 2-core machine may add to a limit (process start, a worker restart, scheduling) before a
#: result that late means the limit did not work: wall-clock assertions check "stopped by the mechanism,
#: not hung" as ``elapsed < limit + HANG_MARGIN_S``, never a speed
HANG_MARGIN_S = 10.0
ERR = "ERR"  # an execution whose reward could not be computed (None works too)
MISSING = "MISSING"  # an execution without a reward record
NO_TURNS = "no-turns"  # an execution whose script made no agent call (reward 1.0)


# ---- real models with scripted replies ----------------------------------------------------------------------
def forced_generate(reply: Callable[[Any], str]) -> Callable[..., list]:
    """A replacement for ``HFPolicy._generate`` (``monkeypatch.setattr(HFPolicy, "_generate", forced_generate(fn))``)
    for tests whose point is a mechanism, not what a model happens to sample: the reply TEXT is
    ``reply(request)`` (a function of the request, e.g. of ``request.sampling.seed``, which is derived from the run
    seed and the same on every machine), while the prompt ids are the model's chat template, the response ids
    the model's tokenizer's, and the log-probs the model's own under teacher forcing at the request's temperature
    (1.0 for greedy), with the policy's LoRA adapter on. So records, rewards, credit and samples are fixed, and
    the updates are real gradients of the real model.

    As ``HFPolicy`` does: a stop string ends the reply and is kept (finish "stop"); otherwise the reply ends
    with the end-of-turn token; ``max_tokens`` (and the context) cut it (finish "length").
    """

    def _generate(self, requests: list) -> list:
        import torch

        from metaagent.learn.logprobs import response_logprobs
        from metaagent.learn.samples import Sample, collate
        from metaagent.policy.base import Completion

        out = []
        for request in requests:
            prompt = self.check_request(request)
            text = reply(request)
            cut = [text.find(s) + len(s) for s in request.sampling.stop if s and s in text]
            ids = self.tokenizer(text[: min(cut)] if cut else text, add_special_tokens=False)["input_ids"]
            if not cut:
                ids = ids + [int(self.tokenizer.eos_token_id)]
            limit = min(request.sampling.max_tokens, self.max_context - len(prompt))
            finish = "length" if len(ids) > limit else "stop"
            ids = ids[:limit]
            temperature = request.sampling.temperature if request.sampling.temperature > 0 else 1.0
            sample = Sample("executor", prompt, ids, [0.0] * len(ids), 0.0, temperature)
            got: list[list[float]] = []
            with self._lock:
                self._run(lambda: got.append(response_logprobs(self.model, collate([sample]))[0][0].float().tolist()))
            logprobs = [float(x) for x in torch.tensor(got[0])[: len(ids)]]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            out.append(Completion(text, prompt, ids, logprobs, finish, self.model_id))
        return out

    return _generate


def seed_of(request) -> int:
    """A request's sampling seed (0 when it has none): what scripted replies may depend on."""
    return int(request.sampling.seed or 0)


# ---- tiny models and samples ----------------------------------------------------------------------------
def tiny_llama(seed: int = 0, tie: bool = False):
    """A 2-layer Llama with a 61-token vocabulary, fp32, seeded: fast enough for exact-gradient tests."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=tie,
        attn_implementation="eager",
        pad_token_id=PAD,
    )
    return LlamaForCausalLM(cfg).float()


def random_samples(n: int, seed: int = 0, roles=("designer", "executor"), logprob=-2.0) -> list:
    """``n`` training samples with random prompts/responses over the tiny vocabulary, alternating roles."""
    from metaagent.learn.samples import Sample

    rng = random.Random(seed)
    out = []
    for i in range(n):
        p, r = rng.randint(1, 9), rng.randint(1, 8)
        out.append(
            Sample(
                role=roles[i % len(roles)],
                prompt_ids=[rng.randrange(VOCAB) for _ in range(p)],
                response_ids=[rng.randrange(VOCAB) for _ in range(r)],
                old_logprobs=[logprob + rng.uniform(-0.5, 0.5) for _ in range(r)],
                advantage=rng.uniform(-1.5, 1.5),
                temperature=rng.choice([1.0, 0.7, 1.3]),
                agent="" if roles[i % len(roles)] == "designer" else "Solver",
                key=(i,),
            )
        )
    return out


# ---- rollout trees --------------------------------------------------------------------------------------
def _ids(rng: random.Random, lo: int, hi: int) -> list[int]:
    return [rng.randrange(1, VOCAB) for _ in range(rng.randint(lo, hi))]


def _turn(k: int, role: str, rng: random.Random) -> AgentTurn:
    response = _ids(rng, 1, 7)
    return AgentTurn(
        k,
        role,
        "sys",
        [{"role": "user", "content": "q"}],
        "r",
        "r",
        _ids(rng, 2, 11),
        response,
        [rng.uniform(-3.0, -0.05) for _ in response],
        "stop",
        "m",
    )


def _reward(x: Any) -> RewardRecord | None:
    if x is None or x == ERR:
        return RewardRecord(None, None, None, error="scorer failed")
    if x == MISSING:
        return None
    return RewardRecord(float(x), float(x), 0.0)


def make_tree(
    rows, task_id: str = "t", *, seed: int = 0, turns: int = 2, roles=("Solver", "Verifier"), calls=None
) -> RolloutTree:
    """A rollout tree from a reward matrix; designs and agent turns carry random token ids and log-probs.

    ``rows[i]`` are the rewards of design i's executions: ``[]`` is an invalid design, a row ``None`` a valid
    design that was never executed; an entry ``None``/``ERR`` is a reward that could not be computed,
    ``MISSING`` an execution without a reward record, ``NO_TURNS`` reward 1.0 without an agent call. Turn
    ``k`` of an execution is played by ``roles[k % len(roles)]``; every execution has ``turns`` agent turns, or
    ``calls[i][j]`` when ``calls`` (the shape of ``rows``) is given.
    """
    rng = random.Random(seed)
    designs = []
    for i, row in enumerate(rows):
        response = _ids(rng, 2, 9)
        sample = DesignerSample(
            [{"role": "user", "content": "design"}],
            "script",
            _ids(rng, 3, 12),
            response,
            [rng.uniform(-2.5, -0.1) for _ in response],
            "stop",
            "m",
        )
        if row == []:
            designs.append(Design(i, "designer", sample, None, CheckReport(False), reward=0.0))
            continue
        execs = []
        for j, x in enumerate(row or []):
            if x is NO_TURNS:
                execs.append(Execution(j, "ok", turns=[], reward=RewardRecord(1.0, 1.0, 0.0)))
                continue
            n_turns = turns if calls is None else calls[i][j]
            agent_turns = [_turn(k, roles[k % len(roles)], rng) for k in range(n_turns)]
            execs.append(Execution(j, "ok", turns=agent_turns, reward=_reward(x)))
        designs.append(Design(i, "designer", sample, "print(1)", CheckReport(True), executions=execs))
    return RolloutTree("run", {"id": task_id, "domain": "math"}, seed, {}, {"designer": "m"}, designs=designs)


def make_control(marks, rewards, select: str = "majority", seed: int = 0) -> Control:
    """A budget-matched control (``RolloutTree.control``): one single-agent execution per mark, with one synthetic
    agent turn each and reward ``rewards[j]`` (``None``/``ERR``: not computable)."""
    rng = random.Random(seed)
    executions = []
    for j, x in enumerate(rewards):
        turn = _turn(0, "Assistant", rng)
        turn.synthetic = True
        executions.append(Execution(j, "ok", answer=f"answer {j}", submitted=True, turns=[turn], reward=_reward(x)))
    return Control(script="submit(Agent('A', 'x')(task))", select=select, marks=list(marks), executions=executions)


def mixed_trees() -> list[RolloutTree]:
    """Three questions with every case credit must handle."""
    return [
        make_tree([[1.0, 0.4, None], [], [0.0, NO_TURNS], [None, None]], seed=1, task_id="q1"),
        make_tree([[0.0, 0.0], [1.4, 1.4], None, []], seed=2, task_id="q2"),
        make_tree([[0.7, 0.2, 1.0], [0.1, 0.9, 0.3]], seed=3, task_id="q3", turns=3),
    ]


def samples_of(trees, roles=("designer", "executor"), temperatures=None, estimator="hierarchical", **credit_options):
    """Credit through metaagent.credit, then build_samples of ``roles`` (the local backend's path)."""
    from metaagent.credit import assign_credit
    from metaagent.learn.samples import build_samples

    credit = assign_credit(trees, estimator, **credit_options)
    return build_samples(
        trees,
        active_roles=roles,
        temperatures=temperatures or {"designer": 0.7, "executor": 1.0},
        turn_advantages=credit.turn_advantages,
    )


# ---- a local HTTP stub ----------------------------------------------------------------------------------
#: route(method, path, body) -> (status, JSON payload or None, extra headers)
Route = Callable[[str, str, Any], tuple[int, Any, dict[str, str]]]


def chat_completion(model: str, text: str, *, finish: str = "stop", prompt_tokens: int = 1, **extra: Any) -> dict:
    """An OpenAI ``chat.completion`` payload with one choice."""
    completion_tokens = max(1, len(text.split()))
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        **extra,
    }


def api_error(code: int, message: str, headers: dict[str, str] | None = None) -> tuple[int, dict, dict[str, str]]:
    return code, {"error": {"message": message, "type": "stub", "code": code}}, headers or {}


class StubServer:
    """A JSON HTTP server on ``127.0.0.1:<free port>`` in a daemon thread, answering with ``route``.

    ``with StubServer(route) as s: s.base_url`` is the ``/v1`` root. A client that hangs up mid-answer (a
    timeout test) is ignored.
    """

    def __init__(self, route: Route) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                try:
                    code, payload, headers = route(method, self.path, body)
                    data = b"" if payload is None else json.dumps(payload).encode()
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> StubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


# ---- the OpenAI-compatible stub of the OpenAIPolicy tests --------------------------------------------------
# A minimal OpenAI-compatible chat server on 127.0.0.1 for the OpenAIPolicy tests (stdlib only).
#
# The ``model`` field of a request picks the behaviour:
#
# - ``echo``: vLLM-style answer ``echo:<last message>`` with token ids, prompt ids and log-probs;
# - ``plain``: text only (no log-probs, no token ids), like a hosted API;
# - ``flaky``: per message text, 429 (Retry-After: 0), then 500, then the ``echo`` answer;
# - ``down``: always 503;
# - ``slow``: sleeps 1 s before answering;
# - ``reject``: 400 with an error message; ``auth``: 401;
# - ``sleepy``: sleeps 0.1 s; the server records the peak number of these requests in flight.


class StubState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []
        self.attempts: dict[str, int] = {}
        self.active = 0
        self.peak = 0


def _echo_response(body: dict[str, Any]) -> dict[str, Any]:
    text = "echo:" + body["messages"][-1]["content"]
    ids = list(text.encode("utf-8"))
    prompt_ids = list("".join(m["content"] for m in body["messages"]).encode("utf-8"))
    finish = "stop"
    if len(ids) > body.get("max_tokens", 10**9):
        ids = ids[: body["max_tokens"]]
        text = bytes(ids).decode("utf-8", errors="ignore")
        finish = "length"
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": finish,
    }
    extra = body.get("return_token_ids")
    if body.get("logprobs"):
        as_ids = body.get("return_tokens_as_token_ids")
        choice["logprobs"] = {
            "content": [
                {
                    "token": f"token_id:{t}" if as_ids else chr(t),
                    "logprob": -0.25 * (k + 1),
                    "bytes": [t],
                    "top_logprobs": [],
                }
                for k, t in enumerate(ids)
            ]
        }
    out: dict[str, Any] = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(prompt_ids) + 7,
            "completion_tokens": len(ids),
            "total_tokens": len(prompt_ids) + 7 + len(ids),
        },
    }
    if extra:
        choice["token_ids"] = ids
        out["prompt_token_ids"] = prompt_ids
    return out


def make_route(state: StubState):
    def route(method: str, path: str, body: Any):
        if method != "POST" or not path.endswith("/chat/completions"):
            return api_error(404, f"no route {path}")
        counted = body.get("model") == "sleepy"
        with state.lock:
            state.bodies.append(body)
            if counted:
                state.active += 1
                state.peak = max(state.peak, state.active)
        try:
            return _answer(body)
        finally:
            if counted:
                with state.lock:
                    state.active -= 1

    def _answer(body: dict[str, Any]):
        model = body.get("model")
        if model == "flaky":
            key = body["messages"][-1]["content"]
            with state.lock:
                state.attempts[key] = n = state.attempts.get(key, 0) + 1
            if n == 1:
                return api_error(429, "rate limited", {"Retry-After": "0"})
            if n == 2:
                return api_error(500, "internal error")
            return 200, _echo_response(body), {}
        if model == "down":
            return api_error(503, "overloaded")
        if model == "reject":
            return api_error(400, "unknown field return_token_ids")
        if model == "auth":
            return api_error(401, "bad key")
        if model == "slow":
            time.sleep(1.0)
        if model == "sleepy":
            time.sleep(0.1)
        if model == "plain":
            return 200, _echo_response({**body, "logprobs": False, "return_token_ids": False}), {}
        return 200, _echo_response(body), {}

    return route


class OpenAIStub(StubServer):
    """The stub on the shared test server (tests/builders.py); ``base_url`` is its ``/v1`` root."""

    def __init__(self) -> None:
        self.state = StubState()
        super().__init__(make_route(self.state))


#: small word problems and function tasks for the distillation tests (cold-start data, short style)
MATH_QUESTIONS = (
    ("Tom has 12 apples and buys 5 more apples. How many apples does Tom have?", "17"),
    ("A shirt costs $20 and is sold at a 25% discount. What is the price?", "15"),
    ("What is 7 * 8?", "56"),
    ("A rectangle is 4 cm by 6 cm. What is its area?", "24"),
    ("A car drives 60 miles per hour for 3 hours. How far does it go?", "180"),
)
CODE_QUESTIONS = (
    ("count_vowels", "Write a function `count_vowels(s)` that returns the number of vowels in the string s."),
    ("total", "Write a function `total(nums)` that returns the sum of a list of integers."),
)


def sample_tasks(n_math: int, n_code: int) -> list:
    """The first ``n_math`` math tasks (ids m0, m1, ...) and ``n_code`` code tasks (c0, ...) listed above."""
    from metaagent.data.tasks import Task

    math = [Task(id=f"m{i}", domain="math", question=q, answer=a, source="test") for i, (q, a) in enumerate(MATH_QUESTIONS)]
    code = [
        Task(id=f"c{i}", domain="code", question=q, tests={"fn_name": fn, "inputs": [["ab"]], "outputs": [1]}, source="test")
        for i, (fn, q) in enumerate(CODE_QUESTIONS)
    ]
    return math[:n_math] + code[:n_code]


DOMAINS_DIR = Path(__file__).resolve().parent / "domains"  # the example plugin domain (arith_domain.py + its data)


def load_plugin_domain(monkeypatch, module: str = "arith_domain"):
    """Load the plugin domain ``module`` (tests/domains/) the way a user does (``METAAGENT_DOMAINS``) and return
    a function that unloads it again: its domain, its sources and the rewards registered meanwhile are gone."""
    import sys

    import metaagent.domain as registry
    from metaagent.data.sources import SOURCES

    registry.domains()  # the built-ins first, so the restored registry keeps them (imported once)
    tables = (registry.DOMAINS._table, registry._loaded, SOURCES._table, registry.REWARDS._table)
    saved = [type(table)(table) for table in tables]
    monkeypatch.syspath_prepend(str(DOMAINS_DIR))
    monkeypatch.setenv(registry.PLUGINS_ENV, module)
    sys.modules.pop(module, None)

    def unload() -> None:
        for table, old in zip(tables, saved):
            table.clear()
            table.update(old)
        sys.modules.pop(module, None)

    return unload


# ---- the benchmarks/ scripts (the drivers' tests: tests/train/test_evidence.py, ...) --------------------------


ROOT = Path(__file__).resolve().parents[1]  # the checkout
BENCHMARKS = ROOT / "benchmarks"
#: a structure matrix's matrix.json reduced to what co-evolution v2 and the drivers on it read: one family, its
#: oracle, the best single template
ORACLE = {
    "per_family": {"arith": {"oracle": "fixed:tool_pair", "oracle_pattern": "tool-pair"}},
    "matrix": {"arith": {"sa": {}, "fixed:tool_pair": {}}},
    "mixture": {"best_single": "sa"},
}


def benchmark_script(name: str):
    """``benchmarks/<name>.py`` loaded afresh as the module ``name`` (benchmarks/ is not a package: the scripts
    load each other from their files, :func:`metaagent.lazy.import_file`; those they load stay as loaded)."""
    sys.modules.pop(name, None)
    return import_file(BENCHMARKS / f"{name}.py", name)


def write_oracle(folder: Path) -> Path:
    """:data:`ORACLE` written as ``folder/matrix.json`` (a driver's ``--oracle``)."""
    path = Path(folder) / "matrix.json"
    path.write_text(json.dumps(ORACLE))
    return path


def run_benchmark(name: str, *args: str, env: dict[str, str] | None = None, timeout_s: float = 900) -> str:
    """Run ``benchmarks/<name>.py args`` from the checkout's root, as its README says (``PYTHONPATH`` the root,
    one OpenMP thread, plus ``env``); fail the test with the tail of its output unless it exits 0, else return
    its stdout and stderr."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    done = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), *args], check=False, cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=timeout_s)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def metric_steps(folder: Path) -> list[int]:
    """The training steps a run folder's ``metrics.jsonl`` holds (validation rows, step < 0, left out)."""
    rows = [json.loads(line) for line in (Path(folder) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["step"] for r in rows if r.get("step", -1) >= 0]


# ---- fixtures of the model-and-sample tests (tests/train/, tests/learn/: their conftest.py imports these) ---------


@pytest.fixture
def model():
    """A fresh tiny random Llama."""
    return tiny_llama()


@pytest.fixture
def make_model():
    return tiny_llama


@pytest.fixture
def make_samples():
    return random_samples


@pytest.fixture
def make_token_tree():
    return make_tree


def install_fake_distribution(root: Path, monkeypatch, *, group: str, entries: dict[str, str], module: str,
                              code: str) -> None:  # fmt: skip
    """A plugin distribution on ``sys.path`` as pip would leave it (a ``*.dist-info`` whose ``entry_points.txt``
    lists ``entries`` in ``group``) and the module ``module`` they name, holding ``code``; nothing of it is
    imported here. ``monkeypatch`` takes it away after the test."""
    dist = root / f"fake_{module}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fake-{module}\nVersion: 1.0\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entries.items())
    (dist / "entry_points.txt").write_text(f"[{group}]\n{lines}\n")
    (root / f"{module}.py").write_text(textwrap.dedent(code))
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(sys.modules, module, raising=False)
