"""Local transformers backend: a batched decode loop with a KV cache, on CPU or one GPU.

The loop is written here rather than delegated to ``model.generate`` because the trainer needs, for every
sampled token, the log-prob under the distribution it was sampled from (see the contract in
:mod:`metaagent.policy.base`), per-request seeds that make results independent of batch composition, and
rows that leave the batch as soon as they finish.

A :class:`_RunningBatch` holds the live rows and their KV cache:

1. ``admit``: chat template -> prompt ids; left padding with a validity mask and ``position_ids`` (B, T);
   prefill with ``logits_to_keep=1`` (only the last position's logits, never B x T x vocab); sample each
   row's first token; merge the new rows into the running batch (keys and values left-padded to a common
   length and concatenated on the batch dimension);
2. ``step``: one decode step: sample one token per live row (:func:`sample_next`), record
   ``log_softmax(logits / T)`` at that token, drop finished rows from the batch and trim padding columns
   that no live row needs any more.

Keys and values live in a :class:`~metaagent.policy.kv.KVStore` that the model's attention writes in place
(the model runs on transformers' public attention interface, without a transformers cache object; see
:mod:`metaagent.policy.kv`).

Prefix reuse (``prefix_cache_mb``, :mod:`metaagent.policy.prefix_cache`): before the prefill, the block-
aligned prefixes that several rows of ``admit`` share (the designer's system prompt and API text, an agent's
system prompt and task) are prefilled once each and cached; each row then starts from its longest cached
prefix and prefills only the rest, and its own full blocks are cached for later calls (the next turn of a
conversation, the same agent in another execution). Rows with different cached lengths share one batch: the
chains are left-padded into the cache, position ids stay absolute and the mask hides every pad, so a row
sees exactly its prompt (equal to a full prefill up to float summation order, ~1e-6 in fp32). The cache
is dropped when the weights change (:meth:`HFPolicy.weights_changed`, and a parameter fingerprint).

Scheduling (``HFPolicy(continuous=...)``): static batching runs each ``generate`` call's requests to the
end under a lock. Continuous batching runs one decode thread that owns the running batch: callers queue
their rows and wait; between decode steps the thread admits queued rows (up to ``max_batch_size``) and each
caller returns as soon as its own rows finished, while the others keep decoding. The thread exits when
nothing is queued or running, and a new call starts it again.
"""

from __future__ import annotations

import collections
import contextlib
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import packed
from .base import ChatRequest, Completion, Policy, PolicyError, RequestError
from .chat import chat_prompt_ids, resolve_chat_template_kwargs
from .models import fix_chat_tokens, load_model_and_tokenizer, torch_dtype
from .precision import DecodeCopy, resolve_dtype
from .prefix_cache import DEFAULT_BLOCK, PrefixCache, shared_prefix_lengths

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from .kv import KVStore, PromptKV

#: end-of-turn tokens that stop generation when they are in the vocabulary (besides the tokenizer's eos)
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")
#: extra tokens decoded around a stop string when scanning the tail of a response for it
STOP_SCAN_MARGIN = 8
#: default memory bound of the prefix cache (MiB); SmolLM2-135M keeps ~45 KB of keys and values per token
DEFAULT_PREFIX_CACHE_MB = 256


@dataclass
class _Row:
    """The decoding state of one request."""

    request: ChatRequest
    prompt_ids: list[int]
    limit: int  # max new tokens: min(max_tokens, context left)
    generator: torch.Generator
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    error: BaseException | None = None  # set when the batch this row was in failed
    finished: threading.Event | None = None  # continuous batching: set when the row left the batch

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.error is not None

    def release(self) -> None:
        """The row left the batch (finished or failed): wake its caller."""
        if self.finished is not None:
            self.finished.set()


class HFPolicy(Policy):
    """Generate with a local transformers causal LM.

    Args:
        model: an alias (``"embedded"``, ``"tiny"``), a local HF model directory, or a loaded
            ``PreTrainedModel`` (then ``tokenizer`` is required). The trainer may update ``.model``'s
            weights in place between calls; generation always uses the current weights.
        tokenizer: the tokenizer when ``model`` is an object; loaded with the model otherwise.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...
        dtype: the dtype generation runs in: ``"float32"``, ``"bfloat16"``, ``"float16"`` or ``"auto"``
            (bfloat16 where the device has bf16 matrix units, else float32;
            :mod:`metaagent.policy.precision`). A model loaded by name is loaded in it (default float32); a
            model object in another dtype (the trainer's fp32 master weights) is served from a copy in this
            dtype, refreshed whenever the model's weights change. None (default): the model's own dtype.
        max_batch_size: at most this many rows decode together; larger request lists are split.
        max_context: prompt + response token limit; defaults to the model's ``max_position_embeddings``.
        continuous: admit concurrent callers' requests into the running batch between decode steps
            (see the module docstring); False runs each call's requests as one batch under a lock. Behind
            a :class:`~metaagent.policy.batcher.BatchingPolicy`, continuous batching only helps with
            ``max_in_flight > 1``; threads may also call a continuous policy directly.
        model_id: the id recorded in completions (default: the name passed, or the config's name_or_path).
        prefix_cache_mb: memory bound of the KV cache of shared prompt prefixes
            (:mod:`metaagent.policy.prefix_cache`); 0 turns prefix reuse off.
        prefix_block: tokens per cached block, the granularity of reuse.
        model_context: a context manager factory entered around every run of the model (the trainer's LoRA
            adapters: makes this policy's adapter the active one on a base shared with other policies).
        prepack: linear layers on CPU multiply in the product form measured fastest for this CPU kind and
            dtype while generating (:mod:`metaagent.policy.packed`: bf16 weights prepacked for oneDNN, the
            fp32 LM head as ``W @ h.T``); False: torch's plain linear.
    """

    def __init__(
        self,
        model: str | PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | None = None,
        *,
        device: str = "cpu",
        dtype: str | None = None,
        max_batch_size: int = 32,
        max_context: int | None = None,
        continuous: bool = False,
        model_id: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        prefix_cache_mb: float = DEFAULT_PREFIX_CACHE_MB,
        prefix_block: int = DEFAULT_BLOCK,
        model_context: Callable[[], Any] | None = None,
        prepack: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ValueError(f"max_batch_size must be a positive integer, got {max_batch_size!r}")
        want = resolve_dtype(dtype, device) if dtype is not None else None
        model, tokenizer, self.model_id = _model_and_tokenizer(model, tokenizer, device, want)
        if model_id is not None:
            self.model_id = model_id
        self.model = model
        self.model_context = model_context
        self.tokenizer = tokenizer
        from .kv import use_decode_attention  # torch: `import metaagent.policy.hf` stays light

        self._copy: DecodeCopy | None = _decode_copy(model, want, model_context)
        self._active: PreTrainedModel = model  # the model of the run in progress (_run)
        self.dtype = str(want or model.dtype).removeprefix("torch.")  # what generation runs in
        use_decode_attention(self.decoder)  # keys and values in the decode loop's own store (metaagent.policy.kv)
        if prepack:
            packed.install(self.decoder)  # each linear's decode form on this CPU kind (packed.DECODE_FORMS)
        self.chat_template_kwargs = resolve_chat_template_kwargs(tokenizer, chat_template_kwargs)
        self.device = device
        self.max_batch_size = max_batch_size
        self.max_context = max_context or int(getattr(model.config, "max_position_embeddings", 0) or 2**31)
        self.continuous = continuous
        self.stop_token_ids = self._stop_token_ids()
        self._lock = threading.Lock()  # held by whoever runs the model
        self._pending: collections.deque[_Row] = collections.deque()  # continuous: rows waiting to be admitted
        self._pending_cond = threading.Condition()  # guards _pending and _driver
        self._driver: threading.Thread | None = None  # continuous: the decode thread, while there is work
        self._running: _RunningBatch | None = None  # continuous: the shared batch
        if not prefix_cache_mb >= 0:
            raise ValueError(f"prefix_cache_mb must be >= 0 (0 = off), got {prefix_cache_mb!r}")
        self.prefix_cache: PrefixCache | None = None
        if prefix_cache_mb > 0:
            self.prefix_cache = PrefixCache(int(prefix_cache_mb * 2**20), block=prefix_block)

    @property
    def decoder(self) -> PreTrainedModel:
        """The model generation runs: ``model`` itself, or its copy in ``dtype`` (refreshed if the weights moved)."""
        return self._copy.model() if self._copy is not None else self.model

    def free_memory(self) -> None:
        """Drop the cached prefixes, the packed weights and the decode copy's weights (made again at the next
        generate)."""
        with self._lock:
            if self.prefix_cache is not None:
                self.prefix_cache.clear()
            packed.drop(self._copy.held if self._copy is not None else self.model)
            if self._copy is not None:
                self._copy.release()

    def weights_changed(self) -> None:
        """The trainer changed the weights: drop every cached prefix (a fingerprint of the parameters
        guards this too, see :meth:`PrefixCache.check_weights`)."""
        if self.prefix_cache is not None:
            with self._lock:
                self.prefix_cache.clear()

    # ------------------------------------------------------------------------------------- request prep
    def _stop_token_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            ids.update(int(i) for i in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]))
        vocab = self.tokenizer.get_vocab()
        ids.update(vocab[t] for t in END_OF_TURN_TOKENS if t in vocab)
        return frozenset(ids)

    def encode(self, request: ChatRequest) -> list[int]:
        """The prompt token ids of a request: its messages through the chat template."""
        return chat_prompt_ids(self.tokenizer, request.messages, self.chat_template_kwargs)

    def check_request(self, request: ChatRequest) -> list[int]:
        """Raise :class:`RequestError` if ``request`` cannot be served; return its prompt ids."""
        ids = self.encode(request)
        if len(ids) >= self.max_context:
            raise RequestError(
                f"the prompt has {len(ids)} tokens but {self.model_id} has a context of {self.max_context}; "
                "shorten the messages"
            )
        return ids

    def _new_row(self, request: ChatRequest) -> _Row:
        prompt = self.check_request(request)
        return _Row(
            request=request,
            prompt_ids=prompt,
            limit=min(request.sampling.max_tokens, self.max_context - len(prompt)),
            generator=_generator(request.sampling.seed),
        )

    def _prefill_shared(self, prompts: list[list[int]]) -> None:
        """Prefill, once each, the block-aligned prefixes that several of ``prompts`` share and that are
        not cached yet (shortest first, so a longer one extends a shorter one's blocks)."""
        pc = self.prefix_cache
        assert pc is not None
        needed = {
            tuple(ids[:n])
            for ids, n in zip(prompts, shared_prefix_lengths(prompts, pc.block))
            if n > len(pc.match(ids, n)) * pc.block
        }
        for prefix in sorted(needed, key=len):
            ids = list(prefix)
            chain = pc.match(ids, len(ids))
            if len(chain) * pc.block < len(ids):
                _RunningBatch(self).prefill([ids], [chain], keep=False)
                pc.stats.shared_prefills += 1

    # -------------------------------------------------------------------------------------- scheduling
    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        rows = [self._new_row(r) for r in requests]  # bad requests fail here, before any compute
        if self.continuous:
            self._generate_continuous(rows)
        else:
            with self._lock:
                for start in range(0, len(rows), self.max_batch_size):
                    chunk = rows[start : start + self.max_batch_size]
                    self._run(lambda chunk=chunk: self._run_static(chunk))
        for row in rows:
            if row.error is not None:
                raise row.error
        return [self._completion(row) for row in rows]

    def _run_static(self, rows: list[_Row]) -> None:
        batch = _RunningBatch(self)
        batch.admit(rows)
        while batch.rows:
            batch.step()

    def _generate_continuous(self, rows: list[_Row]) -> None:
        for row in rows:
            row.finished = threading.Event()
        with self._pending_cond:
            self._pending.extend(rows)
            if self._driver is None:
                self._driver = threading.Thread(target=self._drive_loop, name="metaagent-decode", daemon=True)
                self._driver.start()
        for row in rows:
            row.finished.wait()

    def _drive_loop(self) -> None:
        """The decode thread: drive the running batch while rows are queued or running, then exit."""
        while True:
            with self._lock:
                try:
                    self._run(self._drive)
                except BaseException:  # noqa: BLE001 - _drive handed the error to every row it concerned
                    pass
            with self._pending_cond:
                if not self._pending:
                    self._driver = None
                    return

    def _drive(self) -> None:
        """Admit queued rows between decode steps until nothing is queued or running."""
        if self._running is None:
            self._running = _RunningBatch(self)
        batch = self._running
        new: list[_Row] = []
        try:
            while True:
                room = self.max_batch_size - len(batch.rows)
                with self._pending_cond:
                    new = [self._pending.popleft() for _ in range(min(room, len(self._pending)))]
                if new:
                    batch.admit(new)
                    new = []
                elif batch.rows:
                    batch.step()
                else:
                    return
        except BaseException as e:
            # the batch state is unusable: fail every row in it (and any being admitted), not only one caller's
            for row in [*batch.rows, *new]:
                if not row.done:
                    row.error = e
                row.release()
            self._running = None
            raise

    def _run(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on :attr:`decoder` in eval mode without autograd, then restore its training flag."""
        import torch

        model = self._active = self.decoder
        was_training = model.training
        model.eval()
        try:
            with (
                self.model_context() if self.model_context else contextlib.nullcontext(),
                torch.inference_mode(),
                packed.packing(),
            ):
                fn()
        except torch.OutOfMemoryError as e:  # type: ignore[attr-defined]
            raise PolicyError(
                f"out of memory generating on {self.device}; lower max_batch_size (now {self.max_batch_size}) "
                "or max_tokens"
            ) from e
        finally:
            model.train(was_training)

    # ------------------------------------------------------------------------------------------ per token
    def _forward(
        self, input_ids: torch.Tensor, valid: torch.Tensor, position_ids: torch.Tensor, store: KVStore | PromptKV
    ) -> torch.Tensor:
        """One model call appending ``input_ids`` (B, q) to ``store`` (``valid`` (B, q): False for padding);
        returns the float32 logits of the last position only, shape (B, V)."""
        from .kv import forward_mask

        with store.forward(valid, position_ids):
            out = self._active(
                input_ids=input_ids,
                attention_mask=forward_mask(*input_ids.shape),
                position_ids=position_ids,
                use_cache=False,
                logits_to_keep=1,
            )
        return out.logits[:, -1, :].float()

    def _finish_reason(self, row: _Row) -> str | None:
        if row.response_ids[-1] in self.stop_token_ids:
            return "stop"
        if row.request.sampling.stop and self._hit_stop_string(row):
            return "stop"
        if len(row.response_ids) >= row.limit:
            return "length"
        return None

    def _hit_stop_string(self, row: _Row) -> bool:
        """Whether the newest token completes one of the request's stop strings.

        Only the tail is decoded: a stop string of k bytes spans at most k tokens, and earlier tokens were
        checked at their own steps.
        """
        stops = row.request.sampling.stop
        window = max(len(s.encode("utf-8")) for s in stops) + STOP_SCAN_MARGIN
        tail = self.tokenizer.decode(row.response_ids[-window:], skip_special_tokens=True)
        return any(s in tail for s in stops)

    def _completion(self, row: _Row) -> Completion:
        return Completion(
            text=self.tokenizer.decode(row.response_ids, skip_special_tokens=True),
            prompt_ids=row.prompt_ids,
            response_ids=row.response_ids,
            logprobs=row.logprobs,
            finish_reason=row.finish_reason or "length",
            model=self.model_id,
        )


def _model_and_tokenizer(
    model: str | PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None, device: str, want: str | None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
    """The model on ``device`` (loaded by name, or the one given) with a chat tokenizer, and its model id."""
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        name = str(model)
        model, loaded_tokenizer = load_model_and_tokenizer(name, dtype=want or "float32", device=device)
        tokenizer = tokenizer or loaded_tokenizer
        model_id = name
    else:
        if tokenizer is None:
            raise ValueError(
                "HFPolicy(model=<PreTrainedModel>) needs tokenizer=...; or pass a model name"
            )
        model.to(device)
        model_id = str(getattr(model.config, "name_or_path", "") or type(model).__name__)
    if tokenizer.pad_token_id is None:
        fix_chat_tokens(tokenizer)
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"the tokenizer of {model_id} has no chat template; use an instruct/chat model or set "
            "tokenizer.chat_template"
        )
    return model, tokenizer, model_id


def _decode_copy(
    model: PreTrainedModel, want: str | None, model_context: Callable[[], Any] | None
) -> DecodeCopy | None:
    """A copy of the weights in ``want`` to generate with, when that differs from the model's own dtype."""
    if want is None or torch_dtype(want) == model.dtype:
        return None
    if model_context is not None:
        raise ValueError(
            f"dtype={want!r} serves a copy of the weights, which the model_context (LoRA adapters switched "
            f"on the model itself) would not reach; generate in the model's own {model.dtype} (dtype=None)"
        )
    return DecodeCopy(model, torch_dtype(want))


class _RunningBatch:
    """Live rows and their keys and values (row ``i`` in slot ``i`` of ``store``). Between calls, ``tokens`` (n,)
    holds each row's newest, not yet fed token, which goes to position ``store.lengths[i]``."""

    def __init__(self, policy: HFPolicy) -> None:
        self.policy = policy
        self.rows: list[_Row] = []
        self.store: KVStore | None = None
        self.tokens: torch.Tensor | None = None

    def admit(self, rows: list[_Row]) -> None:
        """Prefill ``rows``, sample their first tokens and merge the unfinished ones into the batch.

        With a prefix cache, prefixes that several of ``rows`` share are prefilled once first, and each row
        then prefills only what follows its longest cached prefix. Whatever the cache, the running batch keeps
        the keys and values of a prefix several rows share once, for all of them, where that saves enough
        reading (cascade attention, :func:`~metaagent.policy.kv.shared_prefixes`).
        """
        from .kv import shared_prefixes

        p, pc = self.policy, self.policy.prefix_cache
        prompts = [r.prompt_ids for r in rows]
        chains: list[list[Any]] = [[] for _ in rows]
        if pc is not None:
            pc.check_weights(p.model)
            p._prefill_shared(prompts)
            chains = [pc.match(ids, len(ids) - 1) for ids in prompts]
            pc.stats.hit_tokens += sum(len(c) * pc.block for c in chains)
        new = type(self)(p)  # a subclass's sampling applies to the first token too
        new.rows = list(rows)
        logits = new.prefill(prompts, chains, shared=shared_prefixes(prompts, self.store.prefix_ids if self.store else ()))
        new._sample(logits)
        if new.rows:
            self._merge(new)

    def prefill(
        self, prompts: list[list[int]], chains: list[list[Any]], keep: bool = True, shared: list[tuple[int, ...]] | None = None
    ) -> torch.Tensor:
        """Prefill ``prompts`` into this (empty) batch (``keep=False``: only into the prefix cache); return the
        last positions' logits (B, V). ``shared[i]``: the prefix row ``i``'s keys and values share with other rows
        in the store (:meth:`~metaagent.policy.kv.KVStore.extend`).

        Each row is prefilled alone: no padding to compute, and a row's prompt keys and values do not depend on
        which rows it was admitted with (left padding of a batched prefill changes bf16 roundings). The prefill
        of a ~200-token prompt is a 200-row matmul already; batching rows would add little. Row ``i``'s first
        ``len(chains[i]) * block`` tokens come from its cached chain and only the rest is computed, at absolute
        positions.
        """
        import torch

        from .kv import KVStore

        logits = []
        store = KVStore()
        for i, (prompt, chain) in enumerate(zip(prompts, chains)):
            row_logits, kv = self._prefill_row(prompt, chain)
            logits.append(row_logits)
            if keep:
                store.extend(kv, [shared[i]] if shared is not None else None)
        if keep:
            self.store = store
        return torch.cat(logits)  # (B, V)

    def _prefill_row(self, prompt: list[int], chain: list[Any]) -> tuple[torch.Tensor, PromptKV]:
        """One prompt after its cached ``chain``: logits of its last position (1, V) and its keys/values."""
        import torch

        from .kv import PromptKV

        p, pc = self.policy, self.policy.prefix_cache
        device = p._active.device
        start = len(chain) * pc.block if chain else 0
        kv = PromptKV()
        if start:
            kv.preload(
                [(k[None], v[None]) for k, v in pc.gather(chain)],  # (1, kv_heads, start, head_dim) per layer
                torch.ones((1, start), dtype=torch.bool, device=device),
                torch.arange(start, device=device)[None],
            )
        ids = torch.tensor([prompt[start:]], device=device)  # (1, q)
        positions = torch.arange(start, len(prompt), device=device)[None]
        logits = p._forward(ids, torch.ones_like(ids, dtype=torch.bool), positions, kv)  # (1, V)
        if pc is not None:
            pc.stats.prefilled_tokens += len(prompt) - start
            if len(prompt) - len(prompt) % pc.block > start:
                layers = [kv.row(0, l) for l in range(kv.n_layers)]  # (kv_heads, len, head_dim), position order
                pc.insert(prompt, start, [(k[:, start:], v[:, start:]) for k, v in layers])
        return logits, kv

    def step(self) -> None:
        """Feed each live row's newest token, then sample the next one."""
        import torch

        assert self.store is not None and self.tokens is not None
        valid = torch.ones((len(self.rows), 1), dtype=torch.bool, device=self.tokens.device)
        logits = self.policy._forward(self.tokens[:, None], valid, self.store.lengths[:, None], self.store)
        self._sample(logits)

    def _sample(self, logits: torch.Tensor) -> None:
        """Sample a token per row from ``logits`` (n, V), record it, and drop rows that finished."""
        tokens, logprobs = sample_next(
            logits, [r.request.sampling for r in self.rows], [r.generator for r in self.rows]
        )
        keep: list[int] = []
        for j, (row, tok, lp) in enumerate(zip(self.rows, tokens.tolist(), logprobs.tolist())):
            row.response_ids.append(tok)
            row.logprobs.append(lp)
            row.finish_reason = self.policy._finish_reason(row)
            if row.finish_reason is None:
                keep.append(j)
        self.tokens = tokens
        if len(keep) < len(self.rows):
            self._select(keep)

    def _select(self, keep: list[int]) -> None:
        """Keep only rows ``keep``: compute follows the live rows."""
        import torch

        kept = set(keep)
        for j, row in enumerate(self.rows):
            if j not in kept:
                row.release()
        if not keep:
            self.rows, self.store, self.tokens = [], None, None
            return
        order = self.store.keep(keep)  # a finished row's slot takes a kept row from the end
        self.rows = [self.rows[j] for j in order]
        self.tokens = self.tokens[torch.tensor(order, device=self.tokens.device)]

    def _merge(self, other: _RunningBatch) -> None:
        """Append ``other``'s rows (their keys and values copied into free slots)."""
        import torch

        if not self.rows:
            self.rows, self.store, self.tokens = other.rows, other.store, other.tokens
            return
        self.store.absorb(other.store)
        self.tokens = torch.cat([self.tokens, other.tokens])
        self.rows = self.rows + other.rows


# ---------------------------------------------------------------------------------------- tensor helpers
def _generator(seed: int | None) -> torch.Generator:
    """A CPU generator per request: its random stream depends only on its own seed, not on the batch."""
    import torch

    g = torch.Generator(device="cpu")
    g.manual_seed(seed if seed is not None else secrets.randbits(63))
    return g


def sample_next(
    logits: torch.Tensor, params: list[Any], generators: list[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row and return ``(tokens, logprobs)``, both of shape (n,).

    ``logprobs[i] = log_softmax(logits[i] / T_i)[tokens[i]]`` with ``T_i = 1`` for greedy rows: the
    temperature-scaled, *untruncated* distribution (top-k/top-p only restrict which tokens can be drawn),
    normalised by :func:`metaagent.policy.logsoftmax.log_softmax` (``z - logsumexp(z)``, the trainer's and
    verl's formula; torch's CPU ``log_softmax`` is up to ~1e-4 off on sharp distributions).

    Sampling is an exponential race: ``argmax_v p_v / q_v`` with ``q_v ~ Exp(1)`` drawn from the row's own
    generator, which picks ``v`` with probability ``p_v`` (the Gumbel-max trick, as vLLM does). A row's
    token therefore depends only on its logits and its seed, and float noise from a different batch
    composition (~1e-6) changes it only on a near-tie of two racers: unlike inverting a float32 CDF over
    the whole vocabulary, where such noise moved low-probability picks in about 1 of 1000 tokens (measured).
    ``q = -log1p(-u)`` from fp64 uniforms ``u`` is the stream ``Tensor.exponential_`` draws (the same numbers,
    bit for bit), at a seventh of its cost: one row's 49k draws take 0.2 ms instead of 1.4 ms.

    Per step, one ``logsumexp`` over (n, V) serves both the sampling distribution and the recorded log-probs,
    and the race runs in place (the same operations on the same numbers as ``log_softmax(z).exp()``,
    ``-log1p(-u)`` and ``token_logprobs``: bit-identical, ``tests/policy/test_policy_sampling.py`` checks it).
    """
    import torch

    n = logits.shape[0]
    temps = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params], dtype=logits.dtype)
    z = logits / temps.to(logits.device)[:, None]  # (n, V)
    logz = torch.logsumexp(z, dim=-1)  # (n,): metaagent.policy.logsoftmax's z - logsumexp(z)
    tokens = logits.argmax(dim=-1)  # (n,) greedy choice; sampled rows are overwritten below
    sampled = [i for i, p in enumerate(params) if p.temperature > 0]
    if sampled:
        every = len(sampled) == n
        rows = None if every else torch.tensor(sampled, device=logits.device)
        probs = (z - logz[:, None]) if every else (z[rows] - logz[rows, None])  # (s, V) log-probs
        probs = probs.exp_()  # (s, V)
        for k, i in enumerate(sampled):
            if params[i].top_k > 0 or params[i].top_p < 1.0:
                probs[k] = _truncate(probs[k], params[i].top_k, params[i].top_p)
        u = torch.empty(probs.shape, dtype=torch.float64)  # (s, V) on CPU, where the generators live
        for k, i in enumerate(sampled):
            u[k].uniform_(generator=generators[i])
        race = u.neg_().log1p_().neg_().to(probs.dtype)  # Exp(1) draws
        picked = probs.div_(race.to(probs.device)).argmax(dim=-1)  # (s,)
        if every:
            tokens = picked
        else:
            tokens[rows] = picked
    logprobs = z.gather(-1, tokens[:, None]).squeeze(-1) - logz  # (n,), as logsoftmax.token_logprobs
    assert tokens.shape == (n,)
    return tokens, logprobs


def _truncate(probs: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Zero the probabilities outside the top-k tokens and outside the top-p nucleus (not renormalised)."""
    import torch

    sorted_p, order = probs.sort(descending=True)  # (V,)
    keep = torch.ones_like(sorted_p, dtype=torch.bool)
    if top_k > 0:
        keep[top_k:] = False
    if top_p < 1.0:
        before = sorted_p.cumsum(0) - sorted_p  # mass strictly before each token
        keep &= before < top_p  # the most likely token is always kept
    out = torch.zeros_like(probs)
    out[order[keep]] = sorted_p[keep]
    return out
