"""Checkpoints that survive: atomic writes, weights_only loads with one-line errors, resume checks."""

from __future__ import annotations

import errno
import os
import re
import warnings
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from selfsup.common.names import override_key
from selfsup.data.config import DataConfig, fingerprinted
from selfsup.models import TransformerConfig
from selfsup.reliability.errors import (  # noqa: F401 - the checkpoint errors, raised (or re-exported) here
    CheckpointCorrupt,
    CheckpointDiskFull,
    CheckpointError,
    CheckpointNotFound,
    CheckpointWriteError,
    NonFiniteLossError,
    ResumeMismatch,
    UnsafeCheckpoint,
)
from selfsup.reliability.redact import redact

# ============================================================================ atomic checkpoint IO

# Every global a real SelfSupModule checkpoint pickles (fp32 and bf16-mixed, encoder and
# encoder-decoder, ModelCheckpoint + TokenThroughput + the callbacks below) is in torch's default
# weights_only allowlist: collections.OrderedDict, torch._utils._rebuild_tensor_v2 and the typed
# storages. Nothing more is needed, so nothing more is allowed; tests/test_reliability.py pins
# this list against a real checkpoint, so a new type shows up there first.
SAFE_GLOBALS: tuple = ()

_DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


def _os_error(err: BaseException) -> OSError | None:
    """The OSError behind err: torch.save wraps a failed write in a RuntimeError ("unexpected pos")."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def _first_line(err: BaseException, limit: int = 160) -> str:
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_local(path) -> bool:
    return "://" not in str(path) or str(path).startswith("file://")


def _open_new(path: Path):
    """Opens a new file for the checkpoint bytes ('x': never an existing one). Tests patch this."""
    return open(path, "xb")


def _fsync_dir(folder: Path) -> None:
    """Makes the rename itself durable; not every filesystem allows it, so best effort."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _other_checkpoints(path: Path) -> str:
    """A hint naming the intact-looking checkpoints beside path, newest first."""
    try:
        others = sorted(
            (p for p in path.parent.glob("*.ckpt") if p.name != path.name and zipfile.is_zipfile(p)),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
    except OSError:
        others = []
    if not others:
        return "use another checkpoint, e.g. last.ckpt's predecessor"
    return "use another checkpoint, newest first: " + ", ".join(str(p) for p in others[:3])


def _why_unreadable(path: Path, err: BaseException) -> str:
    try:
        size = path.stat().st_size
        if size == 0:
            return "the file is empty"
        if not zipfile.is_zipfile(path):
            return f"{size} bytes that are not a complete PyTorch zip archive (a cut-off write or another kind of file)"
    except OSError as os_err:
        return _first_line(os_err)
    return f"{type(err).__name__}: {_first_line(err)}"


def _damaged_entry(path: Path) -> str | None:
    """The first entry of a zip checkpoint whose bytes do not match the CRC-32 the zip records (torch.load does
    not check them), or None. A file that is not a complete zip is left to torch.load's error."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return None


def load_checkpoint_safely(path, map_location: Any = "cpu", mmap: bool = False) -> dict:
    """torch.load(weights_only=True) with one-line CheckpointErrors for missing, corrupt and unsafe files.
    Every entry's CRC-32 is checked first (a full read, as loading is), except for mmap=True loads, which read
    a few settings of a checkpoint that a full load checks later."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointNotFound(
            f"checkpoint {path} does not exist: pass an existing .ckpt file, "
            f"such as outputs/<date>/<time>/checkpoints/last.ckpt"
        )
    damaged = None if mmap else _damaged_entry(path)
    if damaged:
        raise CheckpointCorrupt(
            f"{path} is damaged: its entry {damaged} does not match its CRC-32 checksum (bytes "
            f"changed after it was written); {_other_checkpoints(path)}"
        )
    try:
        with torch.serialization.safe_globals(list(SAFE_GLOBALS)):
            return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as err:  # noqa: BLE001 - zip, pickle, EOF and torch errors all mean: unusable file
        unsafe = _unsafe_globals(path)
        if unsafe:
            raise UnsafeCheckpoint(
                f"refused to load {path}: it holds Python objects that could run code when loaded "
                f"({', '.join(unsafe[:5])}); selfsup checkpoints hold only tensors and plain data, so this file "
                f"was not written by selfsup-train or was tampered with; use a checkpoint you trust"
            ) from None
        raise CheckpointCorrupt(
            f"{path} is truncated or not a checkpoint: {_why_unreadable(path, err)}; {_other_checkpoints(path)}"
        ) from None


def _unsafe_globals(path: Path) -> list[str]:
    """The globals in the file's pickle that weights_only loading does not allow ([] if unreadable)."""
    try:
        with torch.serialization.safe_globals(list(SAFE_GLOBALS)):
            return list(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    except Exception:  # noqa: BLE001 - an unreadable file has no globals to report
        return []


# ============================================================================ resume compatibility

# data settings that decide which text becomes which tokens (not batch size, workers, cache dir), as DataConfig's
# fields say (a key missing from an older checkpoint's record is not compared)
_DATA_KEYS = fingerprinted(DataConfig)
# architecture settings that do not change the function the model computes
_ARCHITECTURE_EXEMPT = tuple(
    f.name for f in fields(TransformerConfig) if f.name not in fingerprinted(TransformerConfig)
)


def _flatten(value: Any, prefix: str, into: dict) -> None:
    if isinstance(value, Mapping):
        for key in sorted(value, key=str):
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), into)
    else:
        into[prefix] = _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or (isinstance(value, Sequence) and not isinstance(value, (str, bytes))):
        return [_plain(v) for v in value]
    return value


def resume_fingerprint(cfg_dict: Mapping, vocab_size: int, tokenizer_hash: str) -> dict[str, Any]:
    """The settings whose change makes a resume meaningless, as {dotted key: value}.

    objective.* and architecture.* (all but activation_checkpointing), the data settings that decide
    the token stream (source and its options, val_fraction, vocab_size, n_sentinels, seq_len), seed,
    and the tokenizer actually used. Not trainer.* (max_steps, lr schedule length, devices, ...)
    nor data.batch_size: users change those when they resume to train longer or elsewhere.
    """
    cfg_dict = redact(_plain(cfg_dict))  # as stored: resume_state keeps a redacted config
    fingerprint: dict[str, Any] = {}
    _flatten(cfg_dict.get("objective") or {}, "objective", fingerprint)
    architecture = {k: v for k, v in (cfg_dict.get("architecture") or {}).items() if k not in _ARCHITECTURE_EXEMPT}
    _flatten(architecture, "architecture", fingerprint)
    data = cfg_dict.get("data") or {}
    for key in _DATA_KEYS:
        if key in data:
            fingerprint[f"data.{key}"] = _plain(data[key])
    fingerprint["seed"] = cfg_dict.get("seed")
    fingerprint["tokenizer.vocab_size"] = int(vocab_size)
    fingerprint["tokenizer.hash"] = str(tokenizer_hash)
    return fingerprint


def resume_state(cfg_dict: Mapping, vocab_size: int, tokenizer_hash: str, max_len: int | None = None) -> dict[str, Any]:
    """What the module adds to checkpoint["selfsup"] (plain data, so weights_only loads it).

    The full objective/architecture/data/seed config is kept (not only today's fingerprint), so a
    later, refined fingerprint can be computed from old checkpoints too; max_len: the model's positions
    (selfsup.load rebuilds a model with relative positions, which has no position table, from it).
    """
    config = {k: _plain(cfg_dict[k]) for k in ("objective", "architecture", "data", "seed") if k in cfg_dict}
    return {
        "config": redact(config),
        "vocab_size": int(vocab_size),
        "tokenizer_hash": str(tokenizer_hash),
        "max_len": max_len,
    }


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, str) and (not value or " " in value) else str(value)
    return text if len(text) <= 60 else text[:59] + "…"


def check_resume_compatible(
    checkpoint_path,
    cfg_dict: Mapping,
    vocab_size: int,
    tokenizer_hash: str,
    resume: str | None = None,
    command: list[str] | None = None,
) -> None:
    """Raise ResumeMismatch naming every setting that differs between the checkpoint and now, and the
    command that works: for `resume=RUN` (its settings already checked: the data changed under it), that
    resume once the data is back; for a new run from `ckpt_path=`, this command (`command`: its
    overrides) with the checkpoint's values.

    Reads only checkpoint["selfsup"] (weights_only, memory-mapped: the tensors are not read). A
    checkpoint without that record (written before the lab stored it) cannot be checked: a warning.
    Keys present on one side only (a config key added since) are not compared.
    """
    checkpoint = load_checkpoint_safely(checkpoint_path, map_location="cpu", mmap=True)
    stored = checkpoint.get("selfsup")
    if not isinstance(stored, Mapping) or not isinstance(stored.get("config"), Mapping):
        warnings.warn(
            f"{checkpoint_path} records no objective/architecture/data settings: "
            f"cannot check that resuming from it makes sense",
            stacklevel=2,
        )
        return
    then = resume_fingerprint(stored["config"], stored.get("vocab_size", -1), stored.get("tokenizer_hash", ""))
    now = resume_fingerprint(cfg_dict, vocab_size, tokenizer_hash)
    for key, recorded in (("tokenizer.vocab_size", "vocab_size"), ("tokenizer.hash", "tokenizer_hash")):
        if recorded not in stored:
            then.pop(key)
    differences = [
        f"{key} is {_short(then[key])} in the checkpoint but {_short(now[key])} now"
        for key in now
        if key in then and then[key] != now[key]
    ]
    if not differences:
        return
    what = f"cannot resume from {checkpoint_path}: " + "; ".join(differences)
    resume = resume or cfg_dict.get("resume")
    if resume:  # its settings were checked: what changed is the data under them
        raise ResumeMismatch(
            f"{what}: the run's data changed since it was trained; put back the data it was "
            f"trained on, then continue: selfsup-train resume={resume}"
        )
    changed = [key for key in now if key in then and then[key] != now[key] and not key.startswith("tokenizer.")]
    if changed:
        kept = [
            o
            for o in command or []
            if not o.startswith(("ckpt_path=", "hydra.run.dir=", "hydra.sweep.dir=")) and override_key(o) not in changed
        ]
        settings = [f"{key}={_override(then[key])}" for key in changed]
        raise ResumeMismatch(
            f"{what}; train with the checkpoint's settings: "
            + " ".join(["selfsup-train", *kept, f"ckpt_path={checkpoint_path}", *settings])
        )
    raise ResumeMismatch(
        f"{what}: the data changed since the checkpoint was trained; train on the data it was "
        f"trained on, or start without ckpt_path"
    )


def _override(value) -> str:
    """A value as a command-line override writes it (null, lists in brackets)."""
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_override(v) for v in value) + "]"
    return str(value)


def slurm_resume_checkpoint(run_dir) -> Path | None:
    """The hpc_ckpt_<n>.ckpt Lightning resumes from by itself on SLURM (highest n), if any."""
    found = []
    for p in Path(run_dir).glob("hpc_ckpt_*.ckpt"):
        match = re.fullmatch(r"hpc_ckpt_(\d+)\.ckpt", p.name)
        if match:
            found.append((int(match.group(1)), p))
    return max(found)[1] if found else None
