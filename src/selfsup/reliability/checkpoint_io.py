"""AtomicCheckpointIO: the Trainer's checkpoint IO (Lightning's TorchCheckpointIO, atomic and safe)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from selfsup.reliability.checkpoints import (
    _DISK_FULL,
    _first_line,
    _fsync_dir,
    _is_local,
    _open_new,
    _os_error,
    load_checkpoint_safely,
)
from selfsup.reliability.errors import CheckpointDiskFull, CheckpointWriteError


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints that are either complete or absent, loaded without running pickled code.

    save: write to ``.<name>.<random>.tmp`` beside the target, flush, fsync, ``os.replace`` over the
    target, fsync the folder. A kill mid-write leaves at most that hidden ``.tmp`` file (never a
    ``.ckpt``) and the previous checkpoint of the same name untouched. A failed write removes the
    temp file and raises a one-line ``CheckpointWriteError`` (``CheckpointDiskFull`` for ENOSPC).

    load: ``torch.load(weights_only=True)``, whatever the caller asks for; a missing, truncated,
    corrupt or unsafe file raises a one-line ``CheckpointError``.
    """

    def __init__(self, resume_hint: str | None = None):
        super().__init__()
        self.resume_hint = resume_hint  # the command that continues the run once the folder is fixed

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
                    f"intact; free space in {path.parent}, then continue: {self.continue_with()}"
                ) from None
            raise CheckpointWriteError(
                f"cannot write checkpoint {path}: {cause.strerror or _first_line(cause)}; earlier checkpoints are "
                f"intact; fix the folder (permissions, mount), then continue: {self.continue_with()}"
            ) from None
        _fsync_dir(path.parent)

    def continue_with(self) -> str:
        return self.resume_hint or "selfsup-train resume=<run dir>"

    def load_checkpoint(
        self, path, map_location: Callable | None = lambda storage, loc: storage, weights_only: bool | None = None
    ) -> dict[str, Any]:
        if not _is_local(path):
            return super().load_checkpoint(path, map_location=map_location, weights_only=True)
        return load_checkpoint_safely(str(path).removeprefix("file://"), map_location=map_location)
