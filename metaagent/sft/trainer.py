"""Supervised fine-tuning for the cold start (paper §4.1, App. A): NLL of the assistant tokens only.

    metaagent-sft --data sft_data/designer.jsonl sft_data/executor.jsonl --model embedded --out runs/sft \\
        --lora-rank 8 --epochs 2

One optimizer step takes ``batch_size`` examples (in a seeded order per epoch) and minimises the token-mean
negative log-likelihood of their assistant tokens::

    L = - (1 / sum_i |o_i|) * sum_i sum_t log pi_theta(o_i,t | c_i, o_i,<t)

where ``c_i`` is the example's prompt through the chat template and ``o_i`` its assistant reply plus the
end-of-turn token (:mod:`metaagent.sft.data`). The step's examples are split into micro-batches by a
padded-token budget (``micro_batch_tokens``) and each micro-batch's summed NLL is divided by the *step's* token
count before ``backward()``, so the accumulated gradient is the gradient of ``L`` however the split falls.
Log-probs come from the RL trainer's :func:`metaagent.learn.logprobs.response_logprobs` at temperature 1
(chunked LM head: never the B x T x V logits). AdamW, global grad-norm clipping, linear warmup then cosine
(or constant) learning rate, ``epochs`` passes.

Full fine-tuning, or LoRA (``lora_rank > 0``, peft's ``LoraConfig`` on all linear layers by default). Every
checkpoint (``save_every`` steps and at exit; :mod:`metaagent.learn.checkpoint`) holds

    models/policy/    the full model (LoRA merged in) + tokenizer: a valid ``--model`` for train-metaagent,
                      metaagent-serve and HFPolicy
    models/adapter/   LoRA only: the adapter alone (peft format, ``PeftModel.from_pretrained``)
    optim/policy.pt   AdamW state; state.json: step, config, data fingerprint, RNG states

and ``OUT/model`` (and ``OUT/adapter``) link to the newest one. ``resume=True`` continues from the newest
checkpoint exactly: the data order is a function of (seed, epoch), the LR a function of the step, and the
RNG states are restored, so 2 + 2 steps equal 4 steps.

GPUs: the same JSONL files train with verl's SFT trainer (multi-turn chat data; convert to parquet first,
e.g. ``datasets.load_dataset("json", data_files=...)["train"].to_parquet("designer.parquet")``)::

    torchrun --nproc_per_node=8 -m verl.trainer.sft_trainer \\
        data.train_files='[designer.parquet,executor.parquet]' data.messages_key=messages \\
        data.max_length=8192 data.truncation=error model.path=Qwen/Qwen3-8B \\
        model.lora_rank=0 optim.lr=1e-5 trainer.total_epochs=2 trainer.default_local_dir=runs/sft

(verl 0.9 ``verl.trainer.sft_trainer`` with the ``sft_trainer_engine`` config; older verl releases call it
``verl.trainer.fsdp_sft_trainer`` with ``data.multiturn.enable=true``.) verl trains every assistant turn
of a conversation, this trainer only the last one; the distilled files have one target per line, so the
only difference is an agent's earlier replies in its memory, which are themselves examples of their own.
TRL reads the files as they are: ``SFTTrainer(model, train_dataset=load_dataset("json", data_files=[...])
["train"], args=SFTConfig(assistant_only_loss=True))``.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from metaagent.config import ConfigError
from metaagent.errors import MetaAgentError
from metaagent.learn.metrics import MetricsLogger
from metaagent.learn.optim import SCHEDULES, OptimizerConfig, autocast, lr_at, make_adamw
from metaagent.policy.models import load_model_and_tokenizer
from metaagent.records import DESIGNER
from metaagent.records import ROLES as KINDS  # an example trains the designer or an executor call
from metaagent.rollout.prompts import designer_prompt_of_examples, domain_hint_of_examples, write_designer_prompt
from metaagent.seeding import derive_seed, seeded_torch

__all__ = ["SFTConfig", "SFTError", "SFTTrainer", "epoch_order", "lr_at"]

POLICY_KEY, ADAPTER_KEY = "policy", "adapter"
#: settings that may differ between a run and its resumption (they do not change the trajectory)
RESUME_MUTABLE = ("out", "save_every", "threads", "tensorboard", "resume", "keep_last")


@dataclass
class SFTConfig(OptimizerConfig):
    """One SFT run. Defaults suit LoRA on the embedded model on a CPU. The optimizer fields (lr, betas,
    weight_decay, grad_clip, schedule, warmup_steps, min_lr_ratio, micro_batch_tokens, logprob_chunk, ...)
    are the one :class:`~metaagent.learn.optim.OptimizerConfig` of the RL trainer, with SFT's defaults.

    Attributes:
        data: chat-messages JSONL files (``metaagent-distill`` output or any TRL-style conversational data).
        model: starting model: "embedded", "tiny" or a local HF directory (e.g. an RL checkpoint).
        out: run directory (checkpoints/, metrics.jsonl, model -> newest merged model).
        epochs: passes over the data. max_steps caps the total number of optimizer steps.
        lr: peak learning rate (default 2e-4 with LoRA, 1e-5 for full fine-tuning).
        batch_size: examples per optimizer step.
        micro_batch_tokens: padded tokens (rows x longest) per forward/backward micro-batch.
        max_len: examples longer than this (prompt + reply tokens) are dropped and counted.
        kinds: which example kinds to train on ("designer", "executor").
        lora_rank: 0 = full fine-tuning; > 0 = LoRA of this rank on ``lora_targets``.
        init_adapter: LoRA only: start the LoRA from this adapter folder (peft format, same rank and targets,
            e.g. the committed cold start) instead of peft's zero-B init, to continue training it on new data.
        warmup_steps: linear warmup from lr / warmup_steps; then ``schedule`` (cosine to min_lr_ratio * lr).
        save_every: checkpoint every k steps (0 = only at exit). keep_last: prune older checkpoints.
        threads: torch CPU threads (1 is fastest on a busy 2-core machine; see the README).
    """

    data: list[str] = field(default_factory=list)
    model: str = "embedded"
    out: str = "runs/sft"
    epochs: PositiveInt = 1
    max_steps: PositiveInt | None = None  # cap on the total optimizer steps (null: epochs decide)
    lr: PositiveFloat | None = None  # peak learning rate; None: 2e-4 with LoRA, 1e-5 for full fine-tuning
    batch_size: PositiveInt = 8
    max_len: Annotated[int, Field(ge=2)] = 1536
    kinds: list[Literal[KINDS]] = field(default_factory=lambda: list(KINDS))
    chat_template_kwargs: dict[str, Any] | None = None  # None: the template's default (Qwen3: no thinking)
    lora_rank: NonNegativeInt = 0
    lora_alpha: PositiveFloat | None = None  # LoRA scaling alpha (alpha / rank); null: 2 x lora_rank
    lora_dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0  # LoRA dropout probability
    lora_targets: str = "all-linear"  # peft's target_modules: the layers that get adapters
    init_adapter: str | None = None  # LoRA only: start from this adapter folder (same rank and targets)
    schedule: Literal[SCHEDULES] = "cosine"  # learning rate after warmup: cosine to min_lr_ratio * lr, or constant
    weight_decay: NonNegativeFloat = 0.0  # AdamW decoupled weight decay (none for SFT)
    save_every: NonNegativeInt = 0
    keep_last: PositiveInt | None = None  # keep only the newest k checkpoints (null: keep all)
    seed: int = 0  # seed of data order, LoRA init and dropout
    device: str = "cpu"  # torch device of the training ("cpu", "cuda")
    threads: PositiveInt | None = None
    tensorboard: bool = False  # also log metrics to TensorBoard (metrics.jsonl is always written)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.data = [str(p) for p in self.data]
        self.kinds = list(self.kinds)
        if self.lr is None:
            self.lr = 2e-4 if self.lora_rank > 0 else 1e-5
        if self.lora_alpha is None:
            self.lora_alpha = 2.0 * self.lora_rank
        if self.init_adapter is not None and self.lora_rank == 0:
            raise ConfigError("--init-adapter needs --lora-rank > 0 (it starts a LoRA from a saved adapter)")
        if not self.kinds:
            raise ConfigError(f"--kinds must be a non-empty subset of {KINDS}, got {self.kinds}")
        missing = [p for p in self.data if not Path(p).is_file()]
        if missing:
            raise ConfigError(f"--data files not found: {missing}")
        if not self.data:
            raise ConfigError("--data needs at least one JSONL file, e.g. sft_data/designer.jsonl")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["betas"] = list(self.betas)
        return d


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The example order of one epoch: a permutation that depends only on (seed, epoch)."""
    order = list(range(n))
    random.Random(f"sft:{seed}:{epoch}").shuffle(order)
    return order


class SFTError(MetaAgentError, RuntimeError):
    """The run cannot start or resume as asked; the message says what to change."""


class SFTTrainer:
    """The local SFT loop (CPU or one GPU). ``run()`` trains to the end (or ``max_steps``) and saves.

    Args:
        config: the run.
        resume: True for the newest checkpoint in ``config.out``, a checkpoint folder, or None/False.
        log: progress callback (one line per step); default prints nothing.
    """

    def __init__(
        self, config: SFTConfig, *, resume: bool | str | None = None, log: Callable[[str], None] | None = None
    ) -> None:
        import torch

        from metaagent.sft.data import build_sft_samples, data_fingerprint, read_chat_jsonl

        self.config = cfg = config
        self.log = log or (lambda line: None)
        self.run_dir = Path(cfg.out)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)
        self.model, self.tokenizer = load_model_and_tokenizer(cfg.model, dtype="float32", device=cfg.device)
        self.base_model = self.model
        if cfg.lora_rank > 0:
            self.model = _with_lora(self.model, cfg)
            if cfg.init_adapter:
                _load_adapter(self.model, cfg)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = make_adamw(self.params, cfg)
        rows = read_chat_jsonl(cfg.data)
        #: the designer prompt style of the designer examples (recorded in the saved model), or None
        self.designer_prompt = designer_prompt_of_examples(rows) if DESIGNER in cfg.kinds else None
        #: False when no designer example shows the task's domain (recorded beside the style; mixed: True)
        self.domain_hint = domain_hint_of_examples(rows) is not False
        self.samples = build_sft_samples(
            rows,
            self.tokenizer,
            max_len=cfg.max_len,
            kinds=cfg.kinds,
            chat_template_kwargs=cfg.chat_template_kwargs,
        )
        self.fingerprint = data_fingerprint(cfg.data)
        self.steps_per_epoch = math.ceil(len(self.samples) / cfg.batch_size)
        total = cfg.epochs * self.steps_per_epoch
        self.total_steps = min(total, cfg.max_steps) if cfg.max_steps else total
        self.step = 0  # optimizer steps done
        self.pad_id = int(self.tokenizer.pad_token_id or 0)
        if resume:
            self._resume(resume)

    # ---- state --------------------------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {
            "sft": {
                "config": self.config.to_dict(),
                "data_fingerprint": self.fingerprint,
                "examples": len(self.samples),
                "total_steps": self.total_steps,
                "steps_per_epoch": self.steps_per_epoch,
            }
        }

    def _resume(self, resume: bool | str) -> None:
        from peft.utils import set_peft_model_state_dict

        from metaagent.learn.checkpoint import latest_checkpoint, load_checkpoint, model_path

        path = latest_checkpoint(self.run_dir) if resume is True else Path(str(resume))
        if path is None:
            raise SFTError(f"--resume: {self.run_dir} has no complete checkpoint; start without --resume")

        saved = json.loads((Path(path) / "state.json").read_text()).get("sft", {})
        diffs = self._config_diffs(saved.get("config", {}))
        if saved.get("data_fingerprint") != self.fingerprint:
            diffs.append("the data files' content changed since the checkpoint")
        if diffs:
            raise SFTError(
                f"cannot resume from {path}: the run differs from the checkpoint's: {'; '.join(diffs)}. "
                "Pass the same options and data as the original run"
            )
        if self.config.lora_rank > 0:
            from safetensors.torch import load_file

            adapter = model_path(path, ADAPTER_KEY)
            set_peft_model_state_dict(self.model, load_file(str(adapter / "adapter_model.safetensors")))
            state = load_checkpoint(path, optimizers={POLICY_KEY: self.optimizer})
        else:
            state = load_checkpoint(
                path, models={POLICY_KEY: self.model}, optimizers={POLICY_KEY: self.optimizer}
            )
        self.step = int(state["step"])
        self.log(f"resumed from {path} at step {self.step}/{self.total_steps}")

    def _config_diffs(self, saved: dict[str, Any]) -> list[str]:
        now = self.config.to_dict()
        return [
            f"{k}: checkpoint {saved.get(k)!r}, now {now[k]!r}"
            for k in sorted(now)
            if k not in RESUME_MUTABLE and saved.get(k) != now[k]
        ]

    # ---- one step -----------------------------------------------------------------------------------------

    def batch_of(self, step: int) -> list:
        """The examples of optimizer step ``step`` (0-based): a slice of that epoch's seeded order."""
        epoch, k = divmod(step, self.steps_per_epoch)
        order = epoch_order(len(self.samples), self.config.seed, epoch)
        idx = order[k * self.config.batch_size : (k + 1) * self.config.batch_size]
        return [self.samples[i] for i in idx]

    def train_step(self, step: int) -> dict[str, float]:
        """Forward/backward the step's micro-batches (token-mean NLL), clip, AdamW step. Returns metrics."""
        import torch

        from metaagent.learn.logprobs import response_logprobs
        from metaagent.learn.samples import collate, micro_batches

        t0 = time.perf_counter()
        batch = self.batch_of(step)
        n_tokens = sum(len(s.response_ids) for s in batch)  # the token-mean's denominator for the whole step
        lr = lr_at(step, self.total_steps, self.config)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        nll_sum: Counter[str] = Counter()
        tokens: Counter[str] = Counter()
        padded = 0
        for mb in micro_batches(batch, self.config.micro_batch_tokens):
            data = {k: v.to(self.config.device) for k, v in collate(mb, self.pad_id).items()}
            with autocast(self.config, torch.device(self.config.device).type):
                logp, _ = response_logprobs(
                    self.model, data, chunk_size=self.config.logprob_chunk
                )  # (B, R), T = 1
            mask = data["response_mask"]  # (B, R)
            nll = -(logp * mask).sum(dim=1)  # (B,) summed NLL per example
            (nll.sum() / n_tokens).backward()
            padded += int(data["input_ids"].numel())
            for s, v in zip(mb, nll.detach().tolist()):
                nll_sum[s.role] += v
                tokens[s.role] += len(s.response_ids)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.config.grad_clip)
        skipped = not torch.isfinite(grad_norm)
        if not skipped:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        elapsed = time.perf_counter() - t0
        metrics = {
            "sft/loss": sum(nll_sum.values()) / n_tokens,
            "sft/tokens": float(n_tokens),
            "sft/lr": lr,
            "sft/grad_norm": float(grad_norm),
            "sft/examples": float(len(batch)),
            "sft/padded_tokens": float(padded),
            "sft/epoch": step / self.steps_per_epoch,
            "sft/step_s": elapsed,
            "sft/tokens_per_s": padded / elapsed if elapsed > 0 else 0.0,
            "sft/skipped_step": float(skipped),
        }
        for role, n in tokens.items():
            metrics[f"sft/loss/{role}"] = nll_sum[role] / n
        return metrics

    # ---- loop ---------------------------------------------------------------------------------------------

    def run(self) -> Path:
        """Train from the current step to the end; checkpoint every ``save_every`` steps and at exit.

        Returns the folder of the final merged model (a valid ``--model``).
        """
        cfg = self.config
        logger = MetricsLogger(
            self.run_dir, tensorboard=cfg.tensorboard, resume_step=self.step - 1 if self.step else None
        )
        if self.step == 0:
            logger.log(-1, {"sft/examples_total": float(len(self.samples)), **self.samples.metrics})
        last_saved = self.step if self.step else None
        try:
            while self.step < self.total_steps:
                metrics = self.train_step(self.step)
                logger.log(self.step, metrics)
                self.log(
                    f"step {self.step + 1}/{self.total_steps}  loss {metrics['sft/loss']:.4f}  "
                    f"lr {metrics['sft/lr']:.2e}  grad {metrics['sft/grad_norm']:.3f}  "
                    f"{metrics['sft/tokens']:.0f} tok  {metrics['sft/step_s']:.1f}s"
                )
                self.step += 1
                if cfg.save_every and self.step % cfg.save_every == 0 and self.step < self.total_steps:
                    self.save()
                    last_saved = self.step
        finally:
            logger.close()
        if last_saved != self.step or not (self.run_dir / "model").exists():
            self.save()
        return self.run_dir / "model"

    def merged_model(self) -> Any:
        """The model to publish: a merged copy with LoRA (training continues on the unmerged one)."""
        if self.config.lora_rank == 0:
            return self.model
        return copy.deepcopy(self.model).merge_and_unload()

    def save(self) -> Path:
        """Write checkpoint ``step`` and point ``OUT/model`` (and ``OUT/adapter``) at it."""
        from metaagent.learn.checkpoint import save_checkpoint

        models: dict[str, Any] = {POLICY_KEY: self.merged_model()}
        if self.config.lora_rank > 0:
            models[ADAPTER_KEY] = self.model  # PeftModel.save_pretrained writes only the adapter
        path = save_checkpoint(
            self.run_dir,
            self.step,
            models=models,
            tokenizers={POLICY_KEY: self.tokenizer},
            optimizers={POLICY_KEY: self.optimizer},
            state=self._state(),
            keep_last=self.config.keep_last,
        )
        if self.designer_prompt:
            for key in models:
                write_designer_prompt(path / "models" / key, self.designer_prompt, self.domain_hint)
        _link(self.run_dir / "model", path / "models" / POLICY_KEY)
        if self.config.lora_rank > 0:
            _link(self.run_dir / "adapter", path / "models" / ADAPTER_KEY)
        self.log(f"saved checkpoint {path}")
        return path


def _with_lora(model: Any, cfg: SFTConfig) -> Any:
    from peft import LoraConfig, get_peft_model

    targets: str | list[str] = cfg.lora_targets
    if targets != "all-linear":
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    with seeded_torch(derive_seed(cfg.seed, "lora")):  # whatever loading the model drew (the tiny model reseeds)
        return get_peft_model(model, lora)


def _load_adapter(model: Any, cfg: SFTConfig) -> None:
    """Copy the adapter weights of ``cfg.init_adapter`` into the fresh LoRA ``model`` (every LoRA tensor must match)."""
    import torch
    from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
    from safetensors.torch import load_file

    folder = Path(cfg.init_adapter)
    weights, config = folder / "adapter_model.safetensors", folder / "adapter_config.json"
    if not weights.is_file() or not config.is_file():
        raise SFTError(f"--init-adapter {folder}: no adapter_model.safetensors + adapter_config.json there")
    saved_cfg = json.loads(config.read_text())
    if saved_cfg.get("r") != cfg.lora_rank or float(saved_cfg.get("lora_alpha", -1)) != float(cfg.lora_alpha):
        raise SFTError(
            f"--init-adapter {folder} has rank {saved_cfg.get('r')} and alpha {saved_cfg.get('lora_alpha')}; "
            f"the run asks rank {cfg.lora_rank} and alpha {cfg.lora_alpha}: pass the same --lora-rank/--lora-alpha"
        )
    state = load_file(str(weights))
    expected = get_peft_model_state_dict(model)
    if set(state) != set(expected) or any(state[k].shape != expected[k].shape for k in expected):
        raise SFTError(f"--init-adapter {folder}: its LoRA tensors do not match this model's (other targets?)")
    set_peft_model_state_dict(model, {k: v.to(torch.float32) for k, v in state.items()})


def _link(link: Path, target: Path) -> None:
    """Point ``link`` at ``target`` with a relative symlink, replaced atomically."""
    tmp = link.with_name(f".{link.name}.tmp-{os.getpid()}")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(os.path.relpath(target, link.parent), tmp)
    os.replace(tmp, link)


def sft_samples_summary(samples: Sequence) -> dict[str, float]:
    """Token statistics of a sample set (for the CLI's header)."""
    lengths = [s.num_tokens for s in samples]
    return {
        "examples": float(len(lengths)),
        "mean_tokens": sum(lengths) / len(lengths) if lengths else 0.0,
        "max_tokens": float(max(lengths)) if lengths else 0.0,
        "response_tokens": float(sum(len(s.response_ids) for s in samples)),
    }
