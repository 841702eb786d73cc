"""The host side of one execution: drive a worker, serve its agent and tool calls, build the record.

Everything a worker sends is untrusted: messages are JSON (see :mod:`.channel`), validated field by field,
and only text goes back. Agent calls become one ``policy.generate`` per worker message (a ``parallel`` of
k agents is one batch of k requests); the turn is recorded here with the Completion's token ids and
log-probs, which never leave the host.

Clocks: ``Limits.timeout_s`` counts the time the script runs on its own, i.e. the time the host waits for
the worker's next message, plus the time of its tool calls unless ``Limits.tool_time_s`` gives tools a
budget of their own; time spent in ``policy.generate`` is never counted there. ``total_timeout_s`` counts
everything. Each tool call runs in a thread of its own inside :func:`metaagent.execution.code.deadline`,
set to whichever budget ends first: a program a tool runs is stopped at it, a tool that does not stop is
abandoned :data:`TOOL_GRACE_S` later (its result is dropped), and the execution ends as soon as a budget is
spent. So an execution never runs more than its budgets plus the grace, whatever its tools do.
"""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import json
import math
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from metaagent.execution.code import deadline as code_deadline
from metaagent.policy.base import ChatRequest, Completion, Policy, RequestError, SamplingParams
from metaagent.records import (
    EXECUTION_STATUSES,
    EXECUTOR,
    AgentTurn,
    Execution,
    ScriptError,
    ToolCall,
    TurnGroup,
    TurnReward,
    turn_graph,
)
from metaagent.seeding import branch_seed, call_seed

from .branching import Brancher, select_best

from .channel import ChannelError, ChannelTimeout, ProtocolError
from .limits import Limits
from .protocol import DELIVERY_CLOSE, agent_system_prompt, extract_delivery

#: the logical role of every agent call in ChatRequest.role (policy accounting and role-to-model routing)
#: executor sampling when the caller gives none
DEFAULT_MAX_TOKENS = 512
MAX_ROLE_CHARS = 200
MAX_TOOL_RESULT_CHARS = 4000
MAX_ERROR_CHARS = 2000
SEND_TIMEOUT_S = 30.0
#: how long after its budget a tool call that does not stop by itself is waited for before it is abandoned
#: (programs a tool runs stop at the budget themselves; this covers reading their result back)
TOOL_GRACE_S = 1.0


def executor_sampling(sampling: SamplingParams | Mapping[str, Any] | None) -> SamplingParams:
    """The executor's sampling: temperature 1.0 by default, always stopping at ``</delivery>``."""
    if sampling is None:
        params = SamplingParams(max_tokens=DEFAULT_MAX_TOKENS, temperature=1.0)
    elif isinstance(sampling, Mapping):
        params = SamplingParams.from_mapping(sampling)
    elif isinstance(sampling, SamplingParams):
        params = sampling
    else:
        raise TypeError(f"sampling must be SamplingParams or a dict, got {type(sampling).__name__}")
    if DELIVERY_CLOSE not in params.stop:
        params = params.replace(stop=params.stop + (DELIVERY_CLOSE,))
    return params


def find_parents(previous: list[AgentTurn], messages: list[dict[str, str]], task_text: str) -> list[int]:
    """Indices of earlier turns whose deliverable (or whole response) appears in ``messages``.

    Text that also occurs in the task itself is no evidence of a dependency and is ignored.
    """
    prompt = "\n".join(m["content"] for m in messages)
    parents = []
    for turn in previous:
        for text in (turn.delivery, turn.response):
            text = (text or "").strip()
            if text and text in prompt and text not in task_text:
                parents.append(turn.index)
                break
    return parents


def _clean(text: Any, limit: int | None = None) -> str:
    """Text from the worker as valid UTF-8 (lone surrogates replaced), optionally cut."""
    if not isinstance(text, str):
        raise ProtocolError(f"expected text from the worker, got {type(text).__name__}")
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text if limit is None else text[:limit]


@dataclass
class _Call:
    role: str
    system: str
    history: list[dict[str, str]]
    message: str


def _parse_calls(message: dict[str, Any]) -> list[_Call]:
    calls = message.get("calls")
    if not isinstance(calls, list) or not calls:
        raise ProtocolError("an agent message must carry a non-empty list of calls")
    out = []
    for c in calls:
        if not isinstance(c, dict):
            raise ProtocolError("each agent call must be an object")
        history = c.get("history")
        if not isinstance(history, list):
            raise ProtocolError("an agent call's history must be a list")
        turns = []
        for i, m in enumerate(history):
            want = "user" if i % 2 == 0 else "assistant"
            if not isinstance(m, dict) or m.get("role") != want:
                raise ProtocolError("an agent's history must alternate user and assistant messages")
            turns.append({"role": want, "content": _clean(m.get("content"))})
        if len(turns) % 2:
            raise ProtocolError("an agent's history must end with an assistant message")
        out.append(
            _Call(
                _clean(c.get("role"), MAX_ROLE_CHARS),
                _clean(c.get("system")),
                turns,
                _clean(c.get("message")),
            )
        )
    return out


def _conversation(call: _Call) -> list[dict[str, str]]:
    """The chat an agent call is served with: its system prompt (role prompt + protocol), memory, message."""
    return [
        {"role": "system", "content": agent_system_prompt(call.system)},
        *call.history,
        {"role": "user", "content": call.message},
    ]


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


class Session:
    """One execution of one script by one policy; :meth:`drive` runs it on a worker."""

    def __init__(
        self,
        source: str,
        task_text: str,
        policy: Policy,
        limits: Limits,
        sampling: SamplingParams,
        tools: Mapping[str, Callable[..., str]],
        seed: int | None,
        index: int = 0,
        branching: Brancher | None = None,
    ) -> None:
        self.source = source
        self.task_text = task_text
        self.policy = policy
        self.limits = limits
        self.sampling = sampling
        self.tools = dict(tools)
        self.seed = seed
        self.index = index
        self.branching = branching  # tree sampling (AT-GRPO); None: one sample per call
        self.groups: list[TurnGroup] = []
        self.turns: list[AgentTurn] = []
        self.tool_calls: list[ToolCall] = []
        self.calls_made = 0
        self.tokens_used = 0
        self.status: str | None = (
            None  # set by the host (limits, timeouts, crashes) or by the worker's report
        )
        self.error: ScriptError | None = None
        self.submitted = False
        self.answer: str | None = None
        self.batches = 0  # agent-call messages served so far
        self.script_s = 0.0
        self.tool_s = 0.0  # time spent in tool calls (Limits.tool_time_s)
        self.deadline: float | None = None  # time.monotonic() of Limits.total_timeout_s
        self.compile_s: float | None = None

    # ---- outcome ------------------------------------------------------------------------------------------
    def _fail(self, status: str, kind: str, message: str, line: int | None = None) -> None:
        """Record the first failure; later ones are consequences of it."""
        if self.status is None:
            self.status, self.error = (
                status,
                ScriptError(type=kind, message=message[:MAX_ERROR_CHARS], line=line),
            )

    def _stop(self, status: str, kind: str, message: str) -> dict[str, Any]:
        self._fail(status, kind, message)
        return {"op": "stop", "reason": message}

    def execution(self, elapsed_s: float) -> Execution:
        status = self.status or "error"
        if self.submitted:
            answer = self.answer
        elif self.turns:
            last = self.turns[-1]
            answer = last.delivery if last.delivery is not None else last.response.strip()
        else:
            answer = None
        return Execution(
            index=self.index,
            status=status,
            answer=answer,
            submitted=self.submitted,
            turns=self.turns,
            tool_calls=self.tool_calls,
            error=self.error,
            elapsed_s=elapsed_s,
            seed=self.seed,
            groups=self.groups,
            graph=turn_graph(self.turns, self.tool_calls),
        )

    # ---- the message loop -----------------------------------------------------------------------------------
    def drive(self, worker: Any) -> bool:
        """Run the script on ``worker``; returns whether the worker may run another script.

        Raises whatever ``policy.generate`` raises except :class:`RequestError` (a host failure such as a
        dead model server is not the script's fault and must not be recorded as a failed execution).
        """
        L = self.limits
        channel = worker.channel
        deadline = self.deadline = None if L.total_timeout_s is None else time.monotonic() + L.total_timeout_s
        run = {
            "op": "run",
            "source": self.source,
            "task": self.task_text,
            "tools": sorted(self.tools),
            "memory_mb": L.memory_mb,
            "cpu_seconds": L.cpu_seconds,
            "max_output_chars": L.max_output_chars,
            "max_answer_chars": L.max_answer_chars,
        }
        try:
            channel.send(run, timeout=SEND_TIMEOUT_S)
        except ChannelError as e:
            self._died(worker, e)
            return False
        while True:
            own_left = self._own_left()
            total_left = math.inf if deadline is None else deadline - time.monotonic()
            t0 = time.monotonic()
            try:
                message = channel.recv(timeout=max(0.0, min(own_left, total_left)))
            except ChannelTimeout:
                worker.kill()
                if own_left <= total_left:
                    self._fail("timeout", "Timeout", f"the script ran for more than {L.timeout_s:g} s of its own time "
                               f"({self._clock_note()}); look for an endless loop")  # fmt: skip
                else:
                    self._fail(
                        "timeout", "TotalTimeout", f"the execution took more than {L.total_timeout_s:g} s"
                    )
                return False
            except ProtocolError as e:
                worker.kill()
                self._fail("error", "ProtocolError", f"the sandbox worker sent an invalid message: {e}")
                return False
            except ChannelError as e:
                self._died(worker, e)
                return False
            self.script_s += time.monotonic() - t0
            op = message.get("op")
            try:
                if op == "done":
                    return self._finish(message)
                if op == "agents":
                    reply = self._serve_agents(message)
                elif op == "tool":
                    reply = self._serve_tool(message)
                else:
                    raise ProtocolError(f"unknown message {op!r}")
            except ProtocolError as e:
                worker.kill()
                self._fail("error", "ProtocolError", f"the sandbox worker sent an invalid message: {e}")
                return False
            try:
                channel.send(reply, timeout=SEND_TIMEOUT_S)
            except ChannelError as e:
                self._died(worker, e)
                return False

    def _died(self, worker: Any, cause: Exception) -> None:
        code = worker.wait_exit()
        if code == -signal.SIGXCPU:
            self._fail(
                "limit", "CpuLimit", f"the script used more than {self.limits.cpu_seconds} CPU-seconds"
            )
        elif code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            self._fail(
                "error", "WorkerCrash", f"the sandbox worker was killed by {name} while running the script"
            )
        else:
            self._fail(
                "error",
                "WorkerCrash",
                f"the sandbox worker exited (code {code}) while running the script: {cause}",
            )

    def _finish(self, done: dict[str, Any]) -> bool:
        status = done.get("status")
        err = done.get("error")
        if isinstance(err, dict):
            line = err.get("line") if isinstance(err.get("line"), int) else None
            kind = _clean(str(err.get("type", "Error")), 100)
            text = _clean(str(err.get("message", "")), MAX_ERROR_CHARS)
        else:
            line, kind, text = None, "Error", ""
        if status == "ok":
            if self.status is None:  # else the host already failed the execution (limit, model error)
                self.status = "ok"
        elif status == "stopped":  # a limit stop: the host's reason was recorded first, else the worker's
            self._fail("limit", kind, text, line)
        elif status in EXECUTION_STATUSES:
            self._fail(status, kind, text, line)
        else:
            raise ProtocolError(f"unknown execution status {status!r}")
        answer = done.get("answer")
        if done.get("submitted") is True and isinstance(answer, str):
            self.submitted, self.answer = True, _clean(answer, self.limits.max_answer_chars)
        if isinstance(done.get("compile_s"), (int, float)):
            self.compile_s = float(done["compile_s"])
        return done.get("healthy") is True

    # ---- agent calls --------------------------------------------------------------------------------------
    def _serve_agents(self, message: dict[str, Any]) -> dict[str, Any]:
        calls = _parse_calls(message)
        conversations = [_conversation(call) for call in calls]
        stop = self._limit_stop(calls, conversations)
        if stop is not None:
            return stop
        requests, first, width = self._requests(calls, conversations)
        t0 = time.perf_counter()
        try:
            completions = self.policy.generate(requests)
        except (
            RequestError
        ) as e:  # the request itself (e.g. longer than the model's context): the script's doing
            return self._stop("error", "RequestError", f"the model could not serve an agent call: {e}")
        elapsed = time.perf_counter() - t0
        previous = list(self.turns)
        replies = []
        batch = self.batches
        self.batches += 1
        for i, call in enumerate(calls):
            role_turn = sum(t.role == call.role for t in self.turns)
            where = (self.calls_made + i, role_turn, batch, previous, elapsed)
            candidates = [  # candidate c of call i at requests[first[i] + c]
                self._candidate(call, requests[n], completions[n], *where) for n in range(first[i], first[i] + width[i])
            ]
            self.tokens_used += sum(len(t.response_ids) for t in candidates)  # the budget counts every candidate
            if width[i] == 1:
                turn = candidates[0]
            else:
                turn = self._select(call.role, role_turn, candidates)
                if turn is None:
                    self.calls_made += i + 1
                    return self._stop(
                        "error", "TurnRewardError",
                        f"no candidate of agent {call.role!r} (turn {role_turn}) has a computable turn reward",
                    )  # fmt: skip
            self.turns.append(turn)
            text = turn.delivery if turn.delivery is not None else turn.response.strip()
            replies.append({"text": text, "response": turn.response})
        self.calls_made += len(calls)
        return {"op": "result", "replies": replies}

    def _limit_stop(self, calls: list[_Call], conversations: list[list[dict[str, str]]]) -> dict[str, Any] | None:
        """The stop reply when serving ``calls`` would pass a limit (agent calls, tokens, message size)."""
        L = self.limits
        if self.calls_made + len(calls) > L.max_agent_calls:
            return self._stop(
                "limit",
                "AgentCallLimit",
                f"the script tried to make more than {L.max_agent_calls} agent calls",
            )
        if L.max_total_tokens - self.tokens_used <= 0:
            return self._stop(
                "limit",
                "TokenLimit",
                f"the agents generated {self.tokens_used} tokens; the limit is {L.max_total_tokens}",
            )
        for call, messages in zip(calls, conversations):
            size = sum(len(m["content"]) for m in messages)
            if size > L.max_message_chars:
                return self._stop(
                    "limit", "MessageTooLarge",
                    f"a call to agent {call.role!r} has {size} characters (system prompt, memory and message); "
                    f"the limit is {L.max_message_chars}: send shorter messages or use memory=False",
                )  # fmt: skip
        return None

    def _requests(
        self, calls: list[_Call], conversations: list[list[dict[str, str]]]
    ) -> tuple[list[ChatRequest], list[int], list[int]]:
        """The policy requests of one batch of calls: K per branched call (candidate c of call i at
        ``requests[first[i] + c]``, ``width[i] = K``), else 1; each capped at the tokens left."""
        remaining = self.limits.max_total_tokens - self.tokens_used
        requests: list[ChatRequest] = []
        first, width = [], []
        for i, (call, messages) in enumerate(zip(calls, conversations)):
            k = 1 if self.branching is None else self.branching.branches(call.role)
            first.append(len(requests))
            width.append(k)
            for c in range(k):
                sampling = self.sampling.replace(
                    max_tokens=min(self.sampling.max_tokens, remaining),
                    seed=branch_seed(self.seed, self.calls_made + i, c),
                )
                requests.append(ChatRequest(messages, sampling, role=EXECUTOR, agent=call.role))
        return requests, first, width

    def _candidate(
        self,
        call: _Call,
        request: ChatRequest,
        completion: Completion,
        call_index: int,
        role_turn: int,
        batch: int,
        previous: list[AgentTurn],
        elapsed: float,
    ) -> AgentTurn:
        """The turn record of one completion of an agent call (the executed turn or a group's candidate)."""
        return AgentTurn(
            index=len(self.turns),
            call_index=call_index,
            role_turn=role_turn,
            batch=batch,
            synthetic=completion.synthetic,
            role=call.role,
            system_prompt=call.system,
            messages=request.messages,
            response=completion.text,
            delivery=extract_delivery(completion.text),
            prompt_ids=list(completion.prompt_ids),
            response_ids=list(completion.response_ids),
            logprobs=None if completion.logprobs is None else list(completion.logprobs),
            finish_reason=completion.finish_reason,
            model=completion.model,
            parents=find_parents(previous, request.messages[1:], self.task_text),
            elapsed_s=elapsed,
            temperature=request.sampling.temperature,
        )

    def _select(self, role: str, role_turn: int, candidates: list[AgentTurn]) -> AgentTurn | None:
        """Score every candidate with the turn reward, record the group, return the executed copy of the
        best one (None: no candidate's reward is computable; the group is still recorded)."""
        assert self.branching is not None
        so_far = list(self.turns)
        for cand in candidates:
            try:
                cand.reward = self.branching.score(so_far, cand)
            except Exception as e:  # noqa: BLE001 - a scorer failure excludes the candidate (counted), never 0
                cand.reward = TurnReward(None, "env", error=f"turn reward failed: {type(e).__name__}: {e}")
        rewards = [c.reward.total if c.reward is not None else None for c in candidates]
        best = select_best(rewards)
        self.groups.append(
            TurnGroup(
                key=self.branching.key(role, role_turn),
                role=role,
                role_turn=role_turn,
                call_index=candidates[0].call_index,
                candidates=candidates,
                selected=0 if best is None else best,
                rewards=rewards,
            )
        )
        return None if best is None else dataclasses.replace(candidates[best])

    # ---- clocks -------------------------------------------------------------------------------------------
    def _own_left(self) -> float:
        """Seconds left of ``timeout_s``: minus the script's own time, and minus its tool time when tools have
        no budget of their own (``limits.tool_time_s`` unset)."""
        tools = self.tool_s if self.limits.tool_time_s is None else 0.0
        return self.limits.timeout_s - self.script_s - tools

    def _tool_left(self) -> float:
        """Seconds the next tool call may take: what is left of ``tool_time_s``, else of ``timeout_s``."""
        if self.limits.tool_time_s is None:
            return self._own_left()
        return self.limits.tool_time_s - self.tool_s

    def _clock_note(self) -> str:
        if self.limits.tool_time_s is None:
            return "tool calls included, agent calls not counted"
        return "agent and tool calls not counted"

    def _tool_budget_stop(self) -> dict[str, Any]:
        L = self.limits
        if L.tool_time_s is None:
            message = f"the script ran for more than {L.timeout_s:g} s of its own time ({self._clock_note()})"
            return self._stop("timeout", "Timeout", f"{message}; its tool calls took {self.tool_s:.1f} s")
        return self._stop("limit", "ToolTimeLimit", f"the script's tool calls took {self.tool_s:.1f} s; the "
                          f"limit is {L.tool_time_s:g} s (limits.tool_time_s)")  # fmt: skip

    # ---- tools --------------------------------------------------------------------------------------------
    def _serve_tool(self, message: dict[str, Any]) -> dict[str, Any]:
        name, args, kwargs = message.get("name"), message.get("args"), message.get("kwargs")
        if not isinstance(name, str) or name not in self.tools:
            raise ProtocolError(f"call of an unknown tool {name!r}")
        if (
            not isinstance(args, list)
            or not isinstance(kwargs, dict)
            or not all(isinstance(k, str) for k in kwargs)
        ):
            raise ProtocolError("tool arguments must be a list and a dict")
        L = self.limits
        if len(self.tool_calls) >= L.max_tool_calls:
            return self._stop(
                "limit", "ToolCallLimit", f"the script made more than {L.max_tool_calls} tool calls"
            )
        if self._tool_left() <= 0:
            return self._tool_budget_stop()
        until = time.monotonic() + self._tool_left()
        if self.deadline is not None:
            until = min(until, self.deadline)
        fn = self.tools[name]
        try:
            arguments = dict(inspect.signature(fn).bind(*args, **kwargs).arguments)
        except TypeError as e:
            return {"op": "raise", "type": "TypeError", "message": f"{name}(): {e}"}
        except ValueError:  # no introspectable signature
            arguments = {"args": args, "kwargs": kwargs}
        t0 = time.perf_counter()
        outcome = call_within(fn, args, kwargs, until)
        self.tool_s += time.perf_counter() - t0
        if outcome is None:  # still running at its budget: abandoned, and the execution ends
            result, ok = "(stopped at the execution's time budget)", False
        elif outcome[1] is None:
            result, ok = (outcome[0] if isinstance(outcome[0], str) else str(outcome[0])), True
        else:  # a failing tool is reported to the script, which may carry on
            result, ok = f"error: {name} failed ({type(outcome[1]).__name__}: {outcome[1]})", False
        result = result[:MAX_TOOL_RESULT_CHARS]
        self.tool_calls.append(
            ToolCall(
                index=len(self.tool_calls),
                name=name,
                args={k: _jsonable(v) for k, v in arguments.items()},
                result=result,
                ok=ok,
                after_turn=len(self.turns),
                elapsed_s=time.perf_counter() - t0,
            )
        )
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return self._stop("timeout", "TotalTimeout", f"the execution took more than {L.total_timeout_s:g} s")
        if outcome is None:
            return self._tool_budget_stop()
        return {"op": "result", "value": result}


def call_within(
    fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], until: float
) -> tuple[Any, Exception | None] | None:
    """``fn(*args, **kwargs)`` in a thread of its own, under :func:`metaagent.execution.code.deadline`
    ``until`` (a ``time.monotonic()`` time): ``(value, None)``, ``(None, the exception it raised)``, or None
    when it is still running :data:`TOOL_GRACE_S` after ``until`` (the thread is abandoned: a daemon whose
    result nobody reads; a program it runs stops at ``until`` by itself)."""
    box: list[tuple[Any, Exception | None]] = []

    def run() -> None:
        try:
            with code_deadline(until):
                box.append((fn(*args, **kwargs), None))
        except Exception as e:  # noqa: BLE001 - handed to the caller
            box.append((None, e))

    context = contextvars.copy_context()
    worker = threading.Thread(target=context.run, args=(run,), name="metaagent-tool", daemon=True)
    worker.start()
    worker.join(max(0.0, until - time.monotonic()) + TOOL_GRACE_S)
    return box[0] if box else None
