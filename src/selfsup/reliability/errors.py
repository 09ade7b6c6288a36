"""The errors of checkpoints and non-finite training: one line a user can act on (exit 2, no traceback)."""

from __future__ import annotations

from selfsup.errors import UserError


class CheckpointError(UserError, RuntimeError):
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


class NonFiniteLossError(UserError, RuntimeError):
    """The loss became nan/inf and the policy says stop."""
