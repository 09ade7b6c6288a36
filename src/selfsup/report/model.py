"""What a report is made of: a `Run` (its config, status and logged history), the config keys that matter, and
`ReportError`, the one-line error every stage raises."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from selfsup.common.names import FIXED_LOSS, HELDOUT_BPB, PAIRS, PROBE, shown
from selfsup.errors import UserError
from selfsup.evaluation.stats import Interval


class ReportError(UserError):
    """A problem the user can fix; printed as one line `error: ...`, exit status 2."""


# Config keys that differ between runs without changing what was trained.
IGNORED_KEYS = {
    "objective.name",
    "architecture.name",
    "data.cache_dir",
    "data.num_workers",
    "trainer.progress_bar",
    "trainer.progress_every_n_steps",
    "trainer.checkpoint_every_n_steps",
}
IGNORED_PREFIXES = ("logger.", "hydra.", "trial.")  # trial: which Optuna trial a job is
MASK_RATE, SPAN_LENGTH, SEED = "objective.mask_rate", "objective.mean_span_length", "seed"


@dataclass
class Run:
    label: str
    path: Path
    sweep: Path
    status: str = "unknown"
    error: str | None = None
    objective: str | None = None
    architecture: str | None = None
    config: dict = field(default_factory=dict)  # flattened .hydra/config.yaml
    history: list[dict] = field(default_factory=list)
    source: str = "-"  # wandb-file | wandb-api | csv | summary.json | -
    wandb_dir: Path | None = None
    wandb_online: bool = False  # an online run, or an offline one already synced
    wandb_record: dict = field(default_factory=dict)  # the run record: run_id, run_group, project, entity, ...
    summary: dict = field(default_factory=dict)  # its summary.json
    note: str | None = None
    predictions: list[dict] = field(default_factory=list)  # the last eval/predictions table: one dict per row

    def last(self, *keys: str) -> float | None:
        """The last logged value of the first of `keys` that was logged."""
        for key in keys:
            for item in reversed(self.history):
                value = _number(item.get(key))
                if value is not None:
                    return value
        return None

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    def metrics(self) -> dict:
        return {
            "val_loss": self.last("val/loss"),
            "val_perplexity": self.last("val/perplexity"),
            "fixed_loss": self.last(FIXED_LOSS),
            "heldout": self.last(HELDOUT_BPB),
            "pairs": self.last(PAIRS),
            "pairs_margin": self.margin(PAIRS),
            "probe": self.last(PROBE),
            "probe_margin": self.margin(PROBE),
            "targets_seen": self.last("train/targets_seen"),
            "signal_per_token": self.last("val/signal_per_token", "train/signal_per_token"),
            "tokens_seen": self.last("train/tokens_seen"),
            "flops_seen": self.last("train/flops_seen"),
            # the run's own (summary.json: training time over the run), else the last logging window's
            "tokens_per_sec": self.summary.get("tokens_per_sec") or self.last("perf/tokens_per_sec"),
            "wall_seconds": self.summary.get("wall_seconds"),
        }

    def logged_keys(self) -> list[str]:
        """Every key logged in the history or kept in summary.json's eval, in the order first seen."""
        keys = [k for item in self.history for k in item]
        return list(dict.fromkeys([*keys, *(self.summary.get("eval") or {})]))

    def task_value(self, key: str) -> float | None:
        """An evaluation value: the last logged, else summary.json's (float64)."""
        found = self.last(key)
        return found if found is not None else _number((self.summary.get("eval") or {}).get(key))

    def margin(self, accuracy_key: str) -> str | None:
        """`+0.121 [+0.102, +0.140]`: the last logged margin over random-init of a score and its 95% interval."""
        key = accuracy_key.removesuffix("/accuracy")
        found = [self.last(f"{key}/{part}") for part in ("margin", "margin_low", "margin_high")]
        return None if None in found else str(Interval(*found))

    def bounded(self, key: str) -> str | None:
        """`5.123 [5.101, 5.145]`: the last value of a score logged with its 95% interval (key_low, key_high: the
        fixed exam's loss, the held-out text's bits per byte)."""
        found = [self.last(key + end) for end in ("", "_low", "_high")]
        return None if None in found else str(Interval(*found, signed=False))

    def interval(self, key: str) -> tuple[float, float] | None:
        """The 95% interval the verdict reads of a score's last value: <key>_low, _high (the fixed exam's loss, the
        held-out text's bits per byte) or, for an accuracy, its margin over random-init's interval drawn around it
        (accuracy - (margin - margin_low), accuracy + (margin_high - margin)); None where neither was logged."""
        value = self.task_value(key)
        if value is None:
            return None
        low, high = self.task_value(key + "_low"), self.task_value(key + "_high")
        if low is not None and high is not None:
            return low, high
        if key.endswith("/accuracy"):
            m, lo, hi = (
                self.task_value(f"{key.removesuffix('/accuracy')}/margin{end}") for end in ("", "_low", "_high")
            )
            if None not in (m, lo, hi):
                return value - (m - lo), value + (hi - m)
        return None

    def curve(self, y_key: str = "val/loss", x_key: str = "train/tokens_seen") -> list[tuple[float, float]]:
        """(x, y) of every logged row that has both."""
        points = []
        for item in self.history:
            y, x = _number(item.get(y_key)), _number(item.get(x_key))
            if _finite(y) and _finite(x):
                points.append((x, y))
        return points

    def val_curve(self) -> list[tuple[float, float]]:
        return self.curve("val/loss")

    def as_summary_row(self, keys: list[str]) -> dict:
        """Its summary.json with the report's swept keys and its own folder (for selfsup.results.verdict)."""
        return {
            **self.summary,
            "objective": self.objective,
            "status": self.status,
            "run_dir": str(self.path),
            "swept": {k: self.value(k) for k in keys if k not in ("objective.name", "architecture.name")},
        }

    def value(self, key: str):
        """A config value; n/a for an objective setting this run's objective does not have."""
        if key.startswith("objective.") and self.config and key not in self.config:
            return "n/a"
        if key not in self.config and f"{key}.name" in self.config:  # a config group (objective=mlm,clm)
            return self.config[f"{key}.name"]
        if key not in self.config and key in (self.summary.get("swept") or {}):  # a group that is no setting (arm=)
            return self.summary["swept"][key]
        return self.config.get(key)


def _number(value) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)  # NaN and inf too: a diverged run's last logged loss is NaN, and says so
    except (TypeError, ValueError):
        return None


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


def _show(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return shown(value)
