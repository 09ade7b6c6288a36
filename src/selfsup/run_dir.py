"""Where run records written before selfsup.run name the run-dir guard (hydra.callbacks `_target_`)."""

from selfsup.run.run_dir import RunDirGuard  # noqa: F401
