"""The stop signal this process received, if any: SIGTERM / SIGUSR1 / SIGINT noted by whichever handler held the
signal (the PreemptionHandler during training, selfsup-train's own before and after it). An evaluation under way
ends at its next boundary (selfsup.evaluation), and a sweep launches no further job (selfsup.run.sweep)."""

from __future__ import annotations

import signal

received: str | None = None  # the first stop signal's name, e.g. "SIGTERM"


def note(signum: int) -> str:
    """Record a stop signal (the first one is kept); its name."""
    global received
    name = signal.Signals(signum).name
    if received is None:
        received = name
    return name


def clear() -> None:
    """A new run or sweep starts with no stop asked for."""
    global received
    received = None
