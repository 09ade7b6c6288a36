"""A rate that changes over training steps: MLM's mask rate, span corruption's noise density (objective.mask_rate).

`objective.schedule` (ScheduleConfig) moves the objective's rate from its start value (the objective's own setting,
e.g. objective.mask_rate=0.3) to `end` over `steps` training steps (default: the run's trainer.max_steps, or the step
its max_flops / max_tokens budget stops it), then holds it there:

    constant   start at every step (end unset or equal to start)
    linear     start + (end - start) * t
    cosine     end + (start - end) * (1 + cos(pi * t)) / 2

with t = min(step / steps, 1) and step the optimizer steps taken so far (Lightning's global_step, so a resumed
run continues the same values). Validation masks at `end`, the rate the run ends at, so val/loss is one series
over the run (Ankner et al. 2023 and Ettin decay 30% -> 15%; GPT-BERT 0.3 -> 0.15).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SHAPES = ("constant", "linear", "cosine")


@dataclass
class ScheduleConfig:
    """objective.schedule: how the objective's rate moves from its start value over training steps."""

    shape: str = "constant"  # constant, linear or cosine
    end: float | None = None  # the rate at the end (unset: the start value, a constant rate)
    steps: int | None = None  # steps from start to end (unset: the run's length, trainer.max_steps or its budget's)


class Schedule:
    """The rate at a training step: `schedule(step)`; validation's is `end`."""

    def __init__(self, start: float, shape: str = "constant", end: float | None = None, steps: int | None = None):
        self.start, self.shape, self.steps = float(start), shape, steps
        self.end = self.start if end is None else float(end)

    @property
    def constant(self) -> bool:
        return self.shape == "constant" or self.end == self.start

    def __call__(self, step: int, total: int | None = None) -> float:
        """The rate after `step` optimizer steps; `total`: the run's max_steps, when `steps` is unset."""
        if self.constant:
            return self.start
        steps = self.steps or total
        t = min(step / steps, 1.0) if steps and steps > 0 else 1.0
        if self.shape == "linear":
            return self.start + (self.end - self.start) * t
        return self.end + (self.start - self.end) * (1 + math.cos(math.pi * t)) / 2


def make_schedule(start: float, settings, check_end) -> Schedule:
    """The Schedule of objective.schedule (a ScheduleConfig, a mapping or None) from the rate `start`; check_end(key,
    value) refuses an end value the rate itself could not take. ObjectiveError names a bad setting."""
    from selfsup.objectives.base import ObjectiveError

    if settings is None:
        settings = ScheduleConfig()
    get = settings.get if hasattr(settings, "get") else lambda key, default=None: getattr(settings, key, default)
    shape, end, steps = get("shape", "constant"), get("end", None), get("steps", None)
    if shape not in SHAPES:
        raise ObjectiveError(f"objective.schedule.shape={shape} is unknown: use one of {', '.join(SHAPES)}")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ObjectiveError(
            f"objective.schedule.steps={steps} must be a whole number of steps >= 1 (unset: the run's "
            f"trainer.max_steps)"
        )
    if end is not None:
        check_end("objective.schedule.end", end)
        if shape == "constant" and float(end) != float(start):
            raise ObjectiveError(
                f"objective.schedule.end={end} with objective.schedule.shape=constant: set "
                f"objective.schedule.shape=linear or cosine to move the rate, or drop objective.schedule.end"
            )
    return Schedule(start, shape, end, steps)
