"""Where run records written before selfsup.run name the sweep's summary (hydra.callbacks `_target_`)."""

from selfsup.run.sweep import SweepSummary  # noqa: F401
