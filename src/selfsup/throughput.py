"""Where run records written before selfsup.training name the throughput callback (`_target_`)."""

from selfsup.training.throughput import TokenThroughput  # noqa: F401
