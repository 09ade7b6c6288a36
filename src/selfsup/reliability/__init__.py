"""Reliability pieces for long runs: atomic checkpoints, safe loading, resume checks, non-finite
losses, preemption, secret redaction and a memory probe.

Each piece is small and stands alone; the lab wires them into its Trainer. In checkpoints.py:

- ``AtomicCheckpointIO``: a ``Trainer(plugins=[...])`` checkpoint IO. Saves go to a temp file in
  the same folder, are flushed and fsynced, then ``os.replace``d into place; loads use
  ``torch.load(weights_only=True)`` (no arbitrary pickle code runs).
- ``resume_fingerprint`` / ``check_resume_compatible``: refuse a resume whose objective,
  architecture, data or seed differ from the checkpoint's, naming every differing key.

In callbacks.py (also ``LastCheckpoint``: last.ckpt every N steps and at the end):

- ``NonFiniteGuard``: a callback whose ``check(loss, trainer)`` the module calls before its
  optimizer step; "stop" at the first nan/inf loss, or "skip" up to ``max_skips`` in a row.
- ``PreemptionHandler``: SIGTERM / SIGUSR1 outside SLURM auto-requeue: save ``last.ckpt`` at the
  next batch end and stop cleanly. Under SLURM auto-requeue Lightning owns its requeue signal.

In redact.py:

- ``redact``: a copy of a config with secrets replaced by ``"***"``.
- ``rss_mb``: resident memory of this process.
"""

from selfsup.reliability.callbacks import LastCheckpoint, NonFiniteGuard, PreemptionHandler
from selfsup.reliability.checkpoints import (
    SAFE_GLOBALS,
    AtomicCheckpointIO,
    CheckpointCorrupt,
    CheckpointDiskFull,
    CheckpointError,
    CheckpointNotFound,
    CheckpointWriteError,
    NonFiniteLossError,
    ResumeMismatch,
    UnsafeCheckpoint,
    check_resume_compatible,
    load_checkpoint_safely,
    resume_fingerprint,
    resume_state,
    slurm_resume_checkpoint,
)
from selfsup.reliability.redact import redact, register_secrets, rss_mb

__all__ = [
    "SAFE_GLOBALS",
    "AtomicCheckpointIO",
    "CheckpointCorrupt",
    "CheckpointDiskFull",
    "CheckpointError",
    "CheckpointNotFound",
    "CheckpointWriteError",
    "LastCheckpoint",
    "NonFiniteGuard",
    "NonFiniteLossError",
    "PreemptionHandler",
    "ResumeMismatch",
    "UnsafeCheckpoint",
    "check_resume_compatible",
    "load_checkpoint_safely",
    "redact",
    "register_secrets",
    "resume_fingerprint",
    "resume_state",
    "rss_mb",
    "slurm_resume_checkpoint",
]
