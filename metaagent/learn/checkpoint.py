"""Atomic training checkpoints: HF-format weights, optimizer state, and a JSON training state with RNG states.

Layout of one checkpoint (``run_dir/checkpoints/step_00000030/``)::

    meta.json          format, step, model keys and their folders (written last: marks a complete checkpoint)
    state.json         the caller's JSON state (schedule, sampler position, ...) plus "rng" (python/numpy/torch)
    models/<key>/      ``save_pretrained`` output (+ tokenizer): a valid ``--model`` path on its own
    optim/<key>.pt     optimizer/updater state (``torch.save``; read back with ``weights_only=True``)
    critics/<key>/     a GAE critic's value model (``save_pretrained``), beside ``optim/critic-<key>.pt``

A checkpoint is built in a hidden temporary folder next to its final place, every file in it is fsynced,
and it is renamed into place (then the parent folder is fsynced), so neither a crash nor ``kill -9``
mid-write leaves a half-written ``step_*`` folder. ``meta.json`` lists every other file with its size
(``files``): a checkpoint whose files do not match (copied in part, truncated on a full disk) is refused by
:func:`verify_checkpoint` in one line, and :func:`latest_checkpoint` skips it for the newest one that
matches. Temporary folders left by a killed writer are removed by the next write. Nothing in ``state.json``
is pickled.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import random
import re
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from metaagent.errors import MetaAgentError
from metaagent.records import EXECUTOR

FORMAT_VERSION = 1
CHECKPOINTS_DIR = "checkpoints"
META_FILE = "meta.json"
_STEP_RE = re.compile(r"^step_(\d{8,})$")
#: the hidden folders of an unfinished write: ``.tmp-step_00000030-<pid>-<ns>`` (``.old-`` while re-saving)
_PARTIAL_RE = re.compile(r"^\.(?:tmp|old)-step_\d{8,}-(\d+)-\d+$")

log = logging.getLogger(__name__)


class CheckpointError(MetaAgentError, RuntimeError):
    """A checkpoint cannot be written or read; the message names the file and the fix."""


# ---- RNG state as JSON ------------------------------------------------------------------------------------


def capture_rng_state() -> dict[str, Any]:
    """Python, numpy (global) and torch (CPU, and CUDA when present) RNG states as JSON-safe data."""
    version, mt, gauss = random.getstate()
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": [version, list(mt), gauss],
        "numpy": {**np_state, "state": {**np_state["state"], "key": np_state["state"]["key"].tolist()}},
        "torch": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode("ascii"),
    }
    if torch.cuda.is_available():
        state["torch_cuda"] = [
            base64.b64encode(s.numpy().tobytes()).decode("ascii") for s in torch.cuda.get_rng_state_all()
        ]
    return state


def _bytes_tensor(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    version, mt, gauss = state["python"]
    random.setstate((version, tuple(mt), gauss))
    np_state = dict(state["numpy"])
    np_state["state"] = {**np_state["state"], "key": np.asarray(np_state["state"]["key"], dtype=np.uint32)}
    np.random.set_state(np_state)
    torch.set_rng_state(_bytes_tensor(state["torch"]))
    if "torch_cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_bytes_tensor(s) for s in state["torch_cuda"]])


# ---- writing ----------------------------------------------------------------------------------------------


def checkpoint_dir(run_dir: str | os.PathLike[str], step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR / f"step_{step:08d}"


def write_json(path: Path, data: Any, what: str) -> None:
    """Write ``data`` as JSON and fsync; refuses what JSON cannot hold (NaN, objects) naming ``what``."""
    try:
        text = json.dumps(data, indent=1, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise CheckpointError(
            f"{what} must be JSON-serialisable (plain dicts, lists, str, finite numbers): {e}"
        ) from None
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _optimizer_state(obj: Any) -> Any:
    return obj.state_dict() if hasattr(obj, "state_dict") else obj


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", key):
        raise CheckpointError(
            f"model key {key!r} must be a simple name (letters, digits, _ . -): it becomes a folder"
        )
    return key


def write_checkpoint(
    run_dir: str | os.PathLike[str],
    step: int,
    state: Mapping[str, Any],
    fill: Callable[[Path], dict[str, Any]],
) -> Path:
    """Create checkpoint folder ``step`` atomically (both backends write through this).

    ``fill(tmp)`` writes the models into a temporary folder and returns their ``meta.json`` fields; then
    ``state.json`` (``state`` plus the RNG states) is written, every file is fsynced, ``meta.json`` (with the
    size of every file, ``files``) is written last, and the folder is renamed into place, so a crash or a
    ``kill -9`` never leaves a half-written checkpoint where ``--resume`` would find it.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"step must be an integer >= 0, got {step!r}")
    if "rng" in state:
        raise CheckpointError("state key 'rng' is reserved for the RNG states")
    final = checkpoint_dir(run_dir, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_writes(final.parent)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}-{time.monotonic_ns()}"
    tmp.mkdir()
    try:
        fields = fill(tmp)
        write_json(tmp / "state.json", {**state, "rng": capture_rng_state()}, "checkpoint state")
        files = _fsync_tree(tmp)
        meta = {"format": FORMAT_VERSION, "step": step, **fields, "files": files, "created_at": time.time()}
        write_json(tmp / META_FILE, meta, "checkpoint meta")
        _fsync_dir(tmp)
        if final.exists():  # re-saving a step: swap, then drop the old one
            old = final.parent / f".old-{final.name}-{os.getpid()}-{time.monotonic_ns()}"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _fsync_tree(root: Path) -> dict[str, int]:
    """fsync every file and folder under ``root``; their sizes by ``/``-separated relative path."""
    files: dict[str, int] = {}
    for folder, dirs, names in os.walk(root):
        for name in sorted(names):
            path = Path(folder) / name
            with open(path, "rb") as f:
                os.fsync(f.fileno())
            files[path.relative_to(root).as_posix()] = path.stat().st_size
        for name in dirs:
            _fsync_dir(Path(folder) / name)
    return dict(sorted(files.items()))


def _fsync_dir(path: Path) -> None:
    """fsync a folder, so the names created or renamed in it are on disk (a no-op where a folder cannot be
    opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_abandoned_writes(root: Path) -> None:
    """Delete the temporary folders of writers that are gone (a killed run), and put back the previous copy of
    a step whose re-save was killed between its two renames; a live writer's folders are kept."""
    for p in root.iterdir():
        m = _PARTIAL_RE.match(p.name)
        if m and p.is_dir() and not _alive(int(m.group(1))):
            final = root / p.name.split("-", 2)[1]
            if p.name.startswith(".old-") and not final.exists() and (p / META_FILE).is_file():
                os.rename(p, final)  # killed between the two renames of a re-save: the old copy goes back
            else:
                shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def save_checkpoint(
    run_dir: str | os.PathLike[str],
    step: int,
    *,
    models: Mapping[str, Any],
    tokenizers: Mapping[str, Any] | None = None,
    optimizers: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    keep_last: int | None = None,
    critics: Mapping[str, Any] | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically and return its folder.

    Args:
        models: physical model key -> Hugging Face model (saved with ``save_pretrained``).
        tokenizers: key -> tokenizer saved next to that model, so the folder is a complete ``--model``.
        optimizers: key -> ``PolicyUpdater`` / ``torch.optim.Optimizer`` (anything with ``state_dict``).
        state: JSON-serialisable training state; RNG states are added under ``"rng"``.
        keep_last: delete all but the newest ``keep_last`` checkpoints afterwards (None keeps all).
        critics: key -> :class:`~metaagent.train.local.critic.Critic` (value model in ``critics/<key>/``, optimizer in
            ``optim/critic-<key>.pt``).
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"step must be an integer >= 0, got {step!r}")
    if not models:
        raise CheckpointError("save_checkpoint needs at least one model")

    def fill(tmp: Path) -> dict[str, Any]:
        model_dirs = {}
        for key, model in models.items():
            out = tmp / "models" / _check_key(key)
            model.save_pretrained(out, safe_serialization=True)
            if tokenizers and key in tokenizers:
                tokenizers[key].save_pretrained(out)
            model_dirs[key] = f"models/{key}"
        for key, opt in (optimizers or {}).items():
            (tmp / "optim").mkdir(exist_ok=True)
            torch.save(_optimizer_state(opt), tmp / "optim" / f"{_check_key(key)}.pt")
        critic_dirs = {}
        for key, critic in (critics or {}).items():
            critic.model.save_pretrained(tmp / "critics" / _check_key(key), safe_serialization=True)
            critic_dirs[key] = f"critics/{key}"
            (tmp / "optim").mkdir(exist_ok=True)
            torch.save(critic.state_dict(), tmp / "optim" / f"critic-{key}.pt")
        extra = {"critics": critic_dirs} if critic_dirs else {}
        return {"models": model_dirs, "optimizers": sorted(optimizers or {}), **extra}

    final = write_checkpoint(run_dir, step, state or {}, fill)
    if keep_last is not None:
        if keep_last < 1:
            raise CheckpointError(f"keep_last must be >= 1 or None, got {keep_last}")
        for old in list_checkpoints(run_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    return final


# ---- reading ----------------------------------------------------------------------------------------------


def list_checkpoints(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Checkpoints of a run that have a ``meta.json`` (written last), oldest first; see
    :func:`latest_checkpoint` for the newest one whose files also match."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_RE.match(p.name)
        if m and p.is_dir() and (p / META_FILE).is_file():
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: str | os.PathLike[str]) -> Path | None:
    """The newest checkpoint of ``run_dir`` that passes :func:`verify_checkpoint`, or None; a newer one that
    does not is skipped with a warning naming what is wrong with it."""
    for path in reversed(list_checkpoints(run_dir)):
        try:
            verify_checkpoint(path)
        except CheckpointError as e:
            log.warning("skipping checkpoint %s: %s", path.name, e)
            continue
        return path
    return None


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    try:
        meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is not a complete checkpoint (no meta.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}/meta.json is corrupt: {e}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}/meta.json is corrupt: not a JSON object")
    if meta.get("format", 0) > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} was written by a newer metaagent (format {meta['format']}); upgrade to load it"
        )
    return meta


def verify_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``meta.json`` of checkpoint ``path`` after checking that every file it lists is there with its size
    (checkpoints written before ``files`` existed are taken as they are); a :class:`CheckpointError` naming
    the first file that differs otherwise."""
    path = Path(path)
    meta = read_meta(path)
    for rel, size in (meta.get("files") or {}).items():
        try:
            found = (path / rel).stat().st_size
        except OSError:
            raise CheckpointError(
                f"{path} is damaged: {rel} is missing (meta.json lists it); resume from an earlier checkpoint"
            ) from None
        if found != size:
            raise CheckpointError(
                f"{path} is damaged: {rel} has {found} bytes, meta.json says {size}; "
                "resume from an earlier checkpoint"
            )
    return meta


def model_path(path: str | os.PathLike[str], key: str) -> Path:
    """The HF folder of model ``key`` in checkpoint ``path`` (usable as ``--model``)."""
    meta = read_meta(path)
    if key not in meta["models"]:
        raise CheckpointError(f"checkpoint {path} has no model {key!r}; it has {sorted(meta['models'])}")
    return Path(path) / meta["models"][key]


def checkpoint_model(spec: str, role: str = EXECUTOR, key: str | None = None) -> str:
    """A model argument as a policy model name: an alias or HF folder as is; a training checkpoint
    (``RUN/checkpoints/step_*``, or a run directory: its latest) to the folder of one of its models: ``key``
    (or ``PATH#key``), else ``role``'s model where the checkpoint has one, else its only model."""
    spec, _, named = spec.partition("#")
    key = key or named or None
    path = Path(spec)
    if (path / CHECKPOINTS_DIR).is_dir() and not (path / "config.json").is_file():
        latest = latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(f"{path} has a checkpoints/ folder but no complete checkpoint (no meta.json)")
        path = latest
    if not (path / "meta.json").is_file():
        return spec
    models = sorted(read_meta(path)["models"])
    key = key or (role if role in models else models[0] if len(models) == 1 else None)
    if key is None:
        raise CheckpointError(f"checkpoint {path} holds models {models}; pick one with {spec}#<key>")
    return str(model_path(path, key))


def load_model_weights(model: torch.nn.Module, folder: str | os.PathLike[str]) -> None:
    """Load ``*.safetensors`` weights from an HF folder into an existing model (tied weights may be absent)."""
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder} has no .safetensors weights")
    expected = model.state_dict()
    loaded: set[str] = set()
    for f in files:
        sd = load_file(str(f))
        unexpected = sorted(set(sd) - set(expected))
        if unexpected:
            raise CheckpointError(
                f"{f} has weights {unexpected[:5]} that {type(model).__name__} does not have; "
                "load this checkpoint with AutoModelForCausalLM.from_pretrained instead"
            )
        model.load_state_dict(sd, strict=False)
        loaded.update(sd)
    ptrs = {expected[k].data_ptr() for k in loaded}
    missing = [k for k in expected if k not in loaded and expected[k].data_ptr() not in ptrs]
    if missing:
        raise CheckpointError(f"{folder} lacks weights {missing[:5]} of {type(model).__name__}")


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    models: Mapping[str, torch.nn.Module] | None = None,
    optimizers: Mapping[str, Any] | None = None,
    restore_rng: bool = True,
    critics: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Restore a checkpoint into existing objects and return the saved JSON state (with ``"step"``).

    Args:
        models: key -> model to load the saved weights into (or build fresh ones from :func:`model_path`).
        optimizers: key -> object with ``load_state_dict`` (``PolicyUpdater`` or optimizer).
        restore_rng: restore python/numpy/torch RNG states.
        critics: key -> :class:`~metaagent.train.local.critic.Critic` to load the saved value model and optimizer into.
    """
    path = Path(path)
    meta = verify_checkpoint(path)
    for key, model in (models or {}).items():
        load_model_weights(model, model_path(path, key))
    for key, opt in (optimizers or {}).items():
        f = path / "optim" / f"{key}.pt"
        if not f.is_file():
            raise CheckpointError(
                f"checkpoint {path} has no optimizer state {key!r}; it has {meta['optimizers']}"
            )
        opt.load_state_dict(torch.load(f, map_location="cpu", weights_only=True))
    for key, critic in (critics or {}).items():
        saved = meta.get("critics", {})
        if key not in saved:
            raise CheckpointError(f"checkpoint {path} has no critic {key!r}; it has {sorted(saved)} (saved without mode gae?)")
        load_model_weights(critic.model, path / saved[key])
        critic.load_state_dict(torch.load(path / "optim" / f"critic-{key}.pt", map_location="cpu", weights_only=True))
    return read_state(path, restore_rng=restore_rng)


def read_state(path: str | os.PathLike[str], *, restore_rng: bool = True) -> dict[str, Any]:
    """The JSON training state of checkpoint ``path`` with its ``"step"``; restores the RNG states saved
    with it unless ``restore_rng`` is False."""
    path = Path(path)
    meta = verify_checkpoint(path)
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}/state.json cannot be read: {e}") from None
    rng = state.pop("rng", None)
    if restore_rng and rng is not None:
        restore_rng_state(rng)
    state["step"] = meta["step"]
    return state
