"""Reliability pieces for long runs: atomic checkpoints, safe loading, resume checks, non-finite
losses, preemption, secret redaction and a memory probe.

Each piece is small and stands alone; the lab wires them into its Trainer:

- ``AtomicCheckpointIO``: a ``Trainer(plugins=[...])`` checkpoint IO. Saves go to a temp file in
  the same folder, are flushed and fsynced, then ``os.replace``d into place; loads use
  ``torch.load(weights_only=True)`` (no arbitrary pickle code runs).
- ``resume_fingerprint`` / ``check_resume_compatible``: refuse a resume whose objective,
  architecture, data or seed differ from the checkpoint's, naming every differing key.
- ``NonFiniteGuard``: a callback whose ``check(loss, trainer)`` the module calls before its
  optimizer step; "stop" at the first nan/inf loss, or "skip" up to ``max_skips`` in a row.
- ``PreemptionHandler``: SIGTERM / SIGUSR1 outside SLURM auto-requeue: save ``last.ckpt`` at the
  next batch end and stop cleanly. Under SLURM auto-requeue Lightning owns its requeue signal.
- ``redact``: a copy of a config with secrets replaced by ``"***"``.
- ``rss_mb``: resident memory of this process.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import signal
import threading
import uuid
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback
from lightning.pytorch.plugins.io import TorchCheckpointIO

log = logging.getLogger("selfsup")

# ============================================================================ errors


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written, read or resumed from; the message is one line a user can act on."""


class CheckpointNotFound(CheckpointError, FileNotFoundError):
    """The checkpoint file does not exist (also a FileNotFoundError, as Lightning expects)."""


class CheckpointWriteError(CheckpointError):
    """Writing a checkpoint failed; the previous file of that name and earlier checkpoints are intact."""


class CheckpointDiskFull(CheckpointWriteError):
    """Writing a checkpoint failed because the disk (or the quota) is full."""


class CheckpointCorrupt(CheckpointError):
    """The file is truncated or not a checkpoint at all."""


class UnsafeCheckpoint(CheckpointError):
    """The file holds Python objects that weights_only loading refuses (it could run code)."""


class ResumeMismatch(CheckpointError):
    """The checkpoint was trained with a different objective, architecture, data or seed."""


class NonFiniteLossError(RuntimeError):
    """The loss became nan/inf and the policy says stop."""


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
        others = sorted((p for p in path.parent.glob("*.ckpt") if p.name != path.name and zipfile.is_zipfile(p)),
                        key=lambda p: p.stat().st_mtime, reverse=True)
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


def load_checkpoint_safely(path, map_location: Any = "cpu", mmap: bool = False) -> dict:
    """torch.load(weights_only=True) with one-line CheckpointErrors for missing, corrupt and unsafe files."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointNotFound(f"checkpoint {path} does not exist: pass an existing .ckpt file, "
                                 f"such as outputs/<date>/<time>/checkpoints/last.ckpt")
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
                f"was not written by selfsup-train or was tampered with; use a checkpoint you trust") from None
        raise CheckpointCorrupt(f"{path} is truncated or not a checkpoint: {_why_unreadable(path, err)}; "
                                f"{_other_checkpoints(path)}") from None


def _unsafe_globals(path: Path) -> list[str]:
    """The globals in the file's pickle that weights_only loading does not allow ([] if unreadable)."""
    try:
        with torch.serialization.safe_globals(list(SAFE_GLOBALS)):
            return list(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    except Exception:  # noqa: BLE001 - an unreadable file has no globals to report
        return []


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints that are either complete or absent, loaded without running pickled code.

    save: write to ``.<name>.<random>.tmp`` beside the target, flush, fsync, ``os.replace`` over the
    target, fsync the folder. A kill mid-write leaves at most that hidden ``.tmp`` file (never a
    ``.ckpt``) and the previous checkpoint of the same name untouched. A failed write removes the
    temp file and raises a one-line ``CheckpointWriteError`` (``CheckpointDiskFull`` for ENOSPC).

    load: ``torch.load(weights_only=True)``, whatever the caller asks for; a missing, truncated,
    corrupt or unsafe file raises a one-line ``CheckpointError``.
    """

    def __init__(self, dir_setting: str = "trainer.checkpoint_dir"):
        super().__init__()
        self.dir_setting = dir_setting  # the config key users set to write checkpoints elsewhere

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__}.save_checkpoint does not take storage_options")
        if not _is_local(path):  # remote URL: fsspec's transaction in Lightning's own IO
            return super().save_checkpoint(checkpoint, path)
        path = Path(str(path).removeprefix("file://"))
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with _open_new(tmp) as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException as err:
            try:
                tmp.unlink()
            except OSError:
                pass
            cause = _os_error(err)
            if cause is None or not isinstance(err, Exception):
                raise
            if cause.errno in _DISK_FULL:
                raise CheckpointDiskFull(
                    f"cannot write checkpoint {path}: the disk is full ({cause.strerror}); earlier checkpoints are "
                    f"intact; free space in {path.parent} or write checkpoints elsewhere with "
                    f"{self.dir_setting}=<dir>, then resume from the last checkpoint") from None
            raise CheckpointWriteError(
                f"cannot write checkpoint {path}: {cause.strerror or _first_line(cause)}; earlier checkpoints are "
                f"intact; fix the folder (permissions, mount) or write checkpoints elsewhere with "
                f"{self.dir_setting}=<dir>") from None
        _fsync_dir(path.parent)

    def load_checkpoint(self, path, map_location: Callable | None = lambda storage, loc: storage,
                        weights_only: bool | None = None) -> dict[str, Any]:
        if not _is_local(path):
            return super().load_checkpoint(path, map_location=map_location, weights_only=True)
        return load_checkpoint_safely(str(path).removeprefix("file://"), map_location=map_location)


# ============================================================================ resume compatibility

# data settings that decide which text becomes which tokens (not batch size, workers, cache dir)
_DATA_KEYS = ("source", "paths", "text_field", "hf_name", "hf_config", "hf_split", "data_files", "streaming",
              "max_documents", "val_fraction", "vocab_size", "n_sentinels", "seq_len")
# architecture settings that do not change the function the model computes
_ARCHITECTURE_EXEMPT = ("activation_checkpointing",)


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


def resume_state(cfg_dict: Mapping, vocab_size: int, tokenizer_hash: str) -> dict[str, Any]:
    """What the module adds to checkpoint["selfsup"] (plain data, so weights_only loads it).

    The full objective/architecture/data/seed config is kept (not only today's fingerprint), so a
    later, refined fingerprint can be computed from old checkpoints too.
    """
    config = {k: _plain(cfg_dict[k]) for k in ("objective", "architecture", "data", "seed") if k in cfg_dict}
    return {"config": redact(config), "vocab_size": int(vocab_size), "tokenizer_hash": str(tokenizer_hash)}


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, str) and (not value or " " in value) else str(value)
    return text if len(text) <= 60 else text[:59] + "…"


def check_resume_compatible(checkpoint_path, cfg_dict: Mapping, vocab_size: int, tokenizer_hash: str) -> None:
    """Raise ResumeMismatch naming every setting that differs between the checkpoint and now.

    Reads only checkpoint["selfsup"] (weights_only, memory-mapped: the tensors are not read). A
    checkpoint without that record (written before the lab stored it) cannot be checked: a warning.
    Keys present on one side only (a config key added since) are not compared.
    """
    checkpoint = load_checkpoint_safely(checkpoint_path, map_location="cpu", mmap=True)
    stored = checkpoint.get("selfsup")
    if not isinstance(stored, Mapping) or not isinstance(stored.get("config"), Mapping):
        warnings.warn(f"{checkpoint_path} records no objective/architecture/data settings: "
                      f"cannot check that resuming from it makes sense", stacklevel=2)
        return
    then = resume_fingerprint(stored["config"], stored.get("vocab_size", -1), stored.get("tokenizer_hash", ""))
    now = resume_fingerprint(cfg_dict, vocab_size, tokenizer_hash)
    for key, recorded in (("tokenizer.vocab_size", "vocab_size"), ("tokenizer.hash", "tokenizer_hash")):
        if recorded not in stored:
            then.pop(key)
    differences = [f"{key} is {_short(then[key])} in the checkpoint but {_short(now[key])} now"
                   for key in now if key in then and then[key] != now[key]]
    if differences:
        raise ResumeMismatch(f"cannot resume from {checkpoint_path}: " + "; ".join(differences) +
                             "; resume with the checkpoint's settings, or start a new run without ckpt_path")


def slurm_resume_checkpoint(run_dir) -> Path | None:
    """The hpc_ckpt_<n>.ckpt Lightning resumes from by itself on SLURM (highest n), if any."""
    found = []
    for p in Path(run_dir).glob("hpc_ckpt_*.ckpt"):
        match = re.fullmatch(r"hpc_ckpt_(\d+)\.ckpt", p.name)
        if match:
            found.append((int(match.group(1)), p))
    return max(found)[1] if found else None


# ============================================================================ non-finite losses


def _last_checkpoint(trainer) -> str:
    cb = getattr(trainer, "checkpoint_callback", None)
    for candidate in (getattr(cb, "last_model_path", ""), getattr(cb, "best_model_path", "")):
        if candidate and os.path.isfile(candidate):
            return candidate
    folder = getattr(cb, "dirpath", None) or os.path.join(trainer.default_root_dir, "checkpoints")
    try:
        ckpts = sorted(Path(folder).glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    except OSError:
        ckpts = []
    return str(ckpts[-1]) if ckpts else f"none yet (checkpoints go to {folder})"


class LastCheckpoint(Callback):
    """``last.ckpt`` every N training steps and at the last step, through the Trainer's
    checkpoint IO (atomic). Lightning's ``save_last`` only rewrites it when a new best checkpoint
    is saved, so a run whose validation loss rose would resume from an old step."""

    def __init__(self, path, every_n_steps: int):
        self.path, self.every_n_steps = Path(path), max(1, int(every_n_steps))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # the last step is saved at its batch end too, not at train end: a train-end checkpoint marks
        # the epoch as over, and a resume from it would start a new epoch's data order
        step = trainer.global_step
        last = trainer.max_steps is not None and 0 < trainer.max_steps <= step
        if step and (step % self.every_n_steps == 0 or last or trainer.should_stop):
            trainer.save_checkpoint(self.path, weights_only=False)


class NonFiniteGuard(Callback):
    """Stops or skips optimizer steps whose loss is nan/inf.

    The module calls ``guard.check(loss, trainer)`` after backward and before ``optimizer.step()``;
    True means: skip this step (zero the grads, step neither optimizer nor scheduler).

    policy "stop": raise NonFiniteLossError at the first non-finite loss.
    policy "skip": skip up to ``max_skips`` non-finite losses in a row; the next one raises. A finite
    step resets the count. The count is saved in checkpoints (callback state).

    Raising happens before the optimizer step, so the weights in memory and in every checkpoint are
    the last good ones; Lightning does not checkpoint on exceptions (ModelCheckpoint's
    save_on_exception is False by default, and on_train_end, where save_last writes, runs only
    when training ends normally).
    """

    def __init__(self, policy: str = "stop", max_skips: int = 10, *, policy_setting: str = "trainer.nonfinite",
                 lr_setting: str = "trainer.lr"):
        if policy not in ("stop", "skip"):
            raise ValueError(f"{policy_setting} must be stop or skip, not {policy!r}")
        if max_skips < 0:
            raise ValueError(f"max_skips must be >= 0, not {max_skips}")
        self.policy, self.max_skips = policy, int(max_skips)
        self.policy_setting, self.lr_setting = policy_setting, lr_setting
        self.consecutive = 0   # non-finite losses in a row, up to now
        self.skipped = 0       # steps skipped in this run, in total

    @staticmethod
    def find(trainer) -> NonFiniteGuard | None:
        """The guard among the trainer's callbacks (for the module's on_fit_start), or None."""
        return next((cb for cb in trainer.callbacks if isinstance(cb, NonFiniteGuard)), None)

    def check(self, loss: torch.Tensor, trainer) -> bool:
        """True: skip this optimizer step. Raises NonFiniteLossError when the policy says stop.

        ``loss`` may hold several values (the loss and the gradient norm, say): any non-finite one
        counts. Pass the loss reduced over devices, or every rank must see the same verdict: with
        several devices the verdict is reduced (any rank non-finite -> all skip or stop).
        """
        values = loss.detach().float().reshape(-1)
        bad = not bool(torch.isfinite(values).all())
        if getattr(trainer, "world_size", 1) > 1:
            bad = bool(trainer.strategy.reduce_boolean_decision(bad, all=False))
        if not bad:
            self.consecutive = 0
            return False
        self.consecutive += 1
        finite = torch.isfinite(values)
        value = str(values[~finite][0].item()) if (~finite).any() else "non-finite on another device"
        step = trainer.global_step
        if self.policy == "stop":
            raise NonFiniteLossError(
                f"loss became {value} at step {step}; the last good checkpoint is {_last_checkpoint(trainer)}; "
                f"lower {self.lr_setting} or use {self.policy_setting}=skip")
        if self.consecutive > self.max_skips:
            raise NonFiniteLossError(
                f"loss was non-finite ({value}) {self.consecutive} times in a row at step {step}, more than the "
                f"{self.max_skips} skips allowed; the last good checkpoint is {_last_checkpoint(trainer)}; "
                f"lower {self.lr_setting}")
        self.skipped += 1
        log.warning(f"loss became {value} at step {step}: step skipped ({self.consecutive} in a row, "
                    f"at most {self.max_skips})")
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"consecutive": self.consecutive, "skipped": self.skipped}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.consecutive = int(state_dict.get("consecutive", 0))
        self.skipped = int(state_dict.get("skipped", 0))


# ============================================================================ preemption


class PreemptionHandler(Callback):
    """SIGTERM / SIGUSR1: save ``last.ckpt`` at the next batch end, then stop cleanly.

    From ``on_train_start`` (after Lightning registered its own handlers) until training ends,
    the signals set a flag; at the next ``on_train_batch_end`` every rank agrees on it, the
    checkpoint is written with ``trainer.save_checkpoint`` (through the Trainer's checkpoint IO:
    atomic with AtomicCheckpointIO) and ``trainer.should_stop`` is set. ``fit`` then returns
    normally (Lightning runs one validation first when validation is enabled): ``self.preempted``
    holds the signal's name and ``self.checkpoint_path`` the file. The lab records the run as
    "preempted" and exits 0.

    Lightning on its own turns SIGTERM into SIGTERMException (a SystemExit) with no checkpoint;
    this handler replaces that during training and puts Lightning's handler back afterwards.
    A second signal before the checkpoint is written hands over to the previous handler at once.

    Under SLURM with auto-requeue (Lightning's SLURMEnvironment, on by default in SLURM batch
    jobs), Lightning owns the requeue signal (SIGUSR1: it saves hpc_ckpt_<n>.ckpt in
    default_root_dir and runs ``scontrol requeue``); this handler leaves that signal alone and
    handles SIGTERM only.
    """

    def __init__(self, dirpath=None, filename: str = "last.ckpt",
                 signals: Sequence[int] = (signal.SIGTERM, signal.SIGUSR1)):
        self.dirpath, self.filename, self.signals = dirpath, filename, tuple(signals)
        self.preempted: str | None = None        # name of the signal that stopped training
        self.checkpoint_path: str | None = None  # the checkpoint written for it
        self._received: int | None = None
        self._previous: dict[int, Any] = {}

    # --------------------------------------------------------------- signals
    @staticmethod
    def cluster_environment(trainer):
        """The Trainer's cluster environment (LightningEnvironment, SLURMEnvironment, ...), or None."""
        return getattr(getattr(trainer, "_accelerator_connector", None), "cluster_environment", None)

    def _handled_signals(self, environment) -> list[int]:
        """Our signals, less the one Lightning requeues on when the environment is SLURM with auto-requeue."""
        from lightning.fabric.plugins.environments import SLURMEnvironment
        handled = list(self.signals)
        if isinstance(environment, SLURMEnvironment) and environment.auto_requeue:
            handled = [s for s in handled if s != environment.requeue_signal]
        return handled

    def _install(self, signals: Sequence[int]) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.warning("preemption handling is off: signals can only be handled in the main thread")
            return
        for signum in signals:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)

    def _restore(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def _on_signal(self, signum: int, frame) -> None:
        if self._received is None:
            self._received = signum
            log.warning(f"received {signal.Signals(signum).name}: saving a checkpoint at the end of this step, "
                        f"then stopping (send it again to stop at once)")
            return
        previous = self._previous.get(signum, signal.SIG_DFL)
        self._restore()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.raise_signal(signum)

    # --------------------------------------------------------------- hooks
    def on_train_start(self, trainer, pl_module) -> None:
        self.preempted, self.checkpoint_path, self._received = None, None, None
        self._install(self._handled_signals(self.cluster_environment(trainer)))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.preempted is not None:
            return
        flag = self._received is not None
        if trainer.world_size > 1:
            flag = bool(trainer.strategy.reduce_boolean_decision(flag, all=False))
        if not flag:
            return
        folder = self.dirpath or getattr(trainer.checkpoint_callback, "dirpath", None) or \
            os.path.join(trainer.default_root_dir, "checkpoints")
        path = os.path.join(str(folder), self.filename)
        trainer.save_checkpoint(path, weights_only=False)
        self.preempted = signal.Signals(self._received).name if self._received is not None else "signal"
        self.checkpoint_path = path
        trainer.should_stop = True
        log.warning(f"{self.preempted}: saved {path} at step {trainer.global_step}; stopping. "
                    f"Resume with ckpt_path={path}")

    def on_train_end(self, trainer, pl_module) -> None:
        self._restore()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._restore()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._restore()


# ============================================================================ secrets

_SECRET_KEY = re.compile(r"(?:^|_)(?:api_?key|token|secret|password|passwd)$|_key$|_token$", re.IGNORECASE)
_SPECIAL_TOKEN = re.compile(r"<[^<>\s]{1,32}>|\[[A-Za-z_]{1,20}\]")  # pad_token: "<pad>", "[MASK]"
_SECRET_TEXT = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{40}(?![0-9A-Za-z])"   # W&B API key
                          r"|(?<![0-9A-Za-z])hf_[A-Za-z0-9]{20,}")             # Hugging Face token
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^/\s@]+@")                         # scheme://user:pass@host


def _secret_key(key: Any) -> bool:
    return isinstance(key, str) and bool(_SECRET_KEY.search(key.replace("-", "_")))


def redact(obj: Any, _secret: bool = False) -> Any:
    """A copy of a nested config (mappings, lists, tuples) with secrets replaced by "***".

    Redacted: every non-empty string under a key named api_key, apikey, token, secret, password,
    passwd or ending in _key / _token (case-insensitive, "-" same as "_"), except special tokens such
    as "<pad>" or "[MASK]" (a tokenizer's pad_token is no secret); numbers, bools and None stay.
    In every other string: 40-hex-character W&B API keys, hf_... tokens and URL passwords.
    Mappings come back as dicts, tuples as tuples, other sequences as lists.
    """
    if isinstance(obj, Mapping):
        return {key: redact(value, _secret or _secret_key(key)) for key, value in obj.items()}
    if isinstance(obj, str):
        if _secret and obj and not _SPECIAL_TOKEN.fullmatch(obj):
            return "***"
        return _URL_PASSWORD.sub(r"\1***@", _SECRET_TEXT.sub("***", obj))
    if isinstance(obj, tuple):
        return tuple(redact(v, _secret) for v in obj)
    if isinstance(obj, Sequence) and not isinstance(obj, (bytes, bytearray)):
        return [redact(v, _secret) for v in obj]
    return obj


# ============================================================================ memory


def rss_mb() -> float:
    """Resident memory of this process now, in MiB (/proc/self/statm; elsewhere the peak, from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            resident_pages = int(f.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource
        import sys
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024
