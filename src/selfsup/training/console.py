"""What a run prints while it trains: a progress line every N steps, a line per part of an evaluation as it
goes (selfsup.evaluation.baselines.report_progress) and one of its results, and (on a
terminal) a live status line. No line is wider than 100 columns (or the terminal, if narrower).

    step 100/200 (50%)  loss 6.518  36,216 tokens/s  0:00:05, 0:00:05 left
    evaluating: the minimal pairs  (the fixed exam: 3.2 s)
    val at step 200: loss 6.377  fixed exam 6.430  pairs 0.508  probe 0.511  ppl 588.0  acc 0.088

Lines go to stderr, so W&B's console log records each once; the live line is written to the terminal
around W&B's capture (a duplicate of stderr's file descriptor), so its repaints are not recorded.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import textwrap
import time
from datetime import timedelta

from lightning.pytorch.callbacks.progress import ProgressBar

from selfsup.common.names import FIXED_LOSS, HELDOUT_BPB, PAIRS, VAL_LOSS
from selfsup.common.width import WIDTH
from selfsup.evaluation.baselines import report_progress
from selfsup.evaluation.pairs import pair_lines
from selfsup.training.throughput import TokenThroughput

# the validation line, most important first (a narrow terminal drops the last ones)
VALIDATION = [
    (VAL_LOSS, "loss", ".3f"),
    (FIXED_LOSS, "fixed exam", ".3f"),
    (HELDOUT_BPB, "bpb", ".3f"),
    (PAIRS, "pairs", ".3f"),
    ("eval/probe/accuracy", "probe", ".3f"),
    ("val/perplexity", "ppl", ".1f"),
    ("val/accuracy", "acc", ".3f"),
    ("val/signal_per_token", "signal/token", ".3f"),
]


def clock(seconds: float) -> str:
    return str(timedelta(seconds=int(max(0.0, seconds))))


def fit(parts: list[str], width: int) -> str:
    """The parts joined by two spaces, dropping trailing parts (then cutting) to fit width."""
    while len(parts) > 1 and len("  ".join(parts)) > width:
        parts = parts[:-1]
    return "  ".join(parts)[:width]


def every_n_steps(max_steps: int, log_every_n_steps: int) -> int:
    """About 20 lines per run, at steps the loggers write (multiples of trainer.log_every_n_steps)."""
    log_every = max(1, log_every_n_steps)
    return log_every * max(1, math.ceil(max_steps / 20 / log_every))


class ConsoleProgress(ProgressBar):
    """Lightning's progress bar slot, filled with plain lines: `every` steps a progress line (step/max,
    mean train loss since the last line, training tokens/s as the run summary counts them, elapsed time
    and time left), after each validation one line of its results, and on a terminal a live line."""

    def __init__(self, every: int, live: bool | None = None):
        super().__init__()
        self.every = every
        self.live = sys.stderr.isatty() if live is None else live
        self.enabled = True
        self.terminal = None
        self.shown = ""

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    @property
    def width(self) -> int:
        return min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns - 1) if self.live else WIDTH

    # ------------------------------------------------------------------ output
    def line(self, text: str) -> None:
        """A lasting line (recorded by W&B's console capture), above the live line; a longer one than the width
        (an evaluation's plan) wrapped, its continuation indented."""
        if not (self.enabled and self.trainer.is_global_zero):
            return
        self.clear_live()
        if len(text) > self.width:
            text = "\n".join(textwrap.wrap(text, self.width, subsequent_indent="    "))
        print(text, file=sys.stderr, flush=True)
        if self.shown:
            self.write_live(self.shown)

    def write_live(self, text: str) -> None:
        if self.terminal is None:
            self.terminal = os.fdopen(os.dup(sys.stderr.fileno()), "w")  # around W&B's capture of sys.stderr
        self.terminal.write("\r" + text[: self.width] + "\x1b[K")
        self.terminal.flush()
        self.shown = text

    def clear_live(self) -> None:
        if self.terminal is not None and self.shown:
            self.terminal.write("\r\x1b[K")
            self.terminal.flush()

    # ------------------------------------------------------------------ state
    def throughput(self):
        return next((c for c in self.trainer.callbacks if isinstance(c, TokenThroughput)), None)

    def progress(self, loss: float | None) -> str:
        trainer, step = self.trainer, self.trainer.global_step
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        elapsed = time.perf_counter() - self.start
        done = step - self.first_step
        parts = [f"step {step}/{total} ({100 * step / total:.0f}%)" if total else f"step {step}"]
        if loss is not None and math.isfinite(loss):
            parts.append(f"loss {loss:.3f}")
        meter = self.throughput()
        speed = meter.tokens_per_sec() if meter is not None else None
        if speed:
            parts.append(f"{speed:,.0f} tokens/s")
        left = f", {clock(elapsed / done * (total - step))} left" if total and done > 0 else ""
        parts.append(f"{clock(elapsed)}{left}")
        return fit(parts, self.width)

    # ------------------------------------------------------------------ hooks
    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        report_progress(self.line)  # the evaluation's parts as they go (rank zero's, like every line)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        report_progress(None)

    def on_train_start(self, trainer, pl_module) -> None:
        self.start, self.first_step = time.perf_counter(), trainer.global_step
        self.loss_sum, self.loss_count, self.last_live, self.printed = None, 0, 0.0, trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None:  # summed on the device: read at a printed line only
            loss = loss.detach().float()
            self.loss_sum = loss if self.loss_sum is None else self.loss_sum + loss
            self.loss_count += 1
        step = trainer.global_step
        if step != self.printed and (step % self.every == 0 or trainer.should_stop or step == trainer.max_steps):
            self.printed = step
            mean = float(self.loss_sum) / self.loss_count if self.loss_count else None
            self.loss_sum, self.loss_count = None, 0
            self.line(self.progress(mean))
        elif self.live and self.enabled and trainer.is_global_zero and time.perf_counter() - self.last_live > 0.2:
            self.last_live = time.perf_counter()
            self.write_live(self.progress(float(loss) if loss is not None else None))

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        m = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        step, results = getattr(pl_module, "last_eval", (None, {}))
        if step == trainer.global_step:  # an evaluation ran at this validation
            m.update({k: float(v) for k, v in results.items()})
        head = f"val at step {trainer.global_step}:"
        parts = [f"{label} {m[key]:{fmt}}" for key, label, fmt in VALIDATION if key in m]
        self.line(head + " " + fit(parts, self.width - len(head) - 1))
        evaluation = getattr(pl_module, "evaluation", None)
        if step == trainer.global_step and evaluation is not None:  # each pair score with its scorer's name
            for line in pair_lines(m, evaluation.pair_scorers()):
                self.line("  " + line)

    def on_train_end(self, trainer, pl_module) -> None:
        self.clear_live()
        self.shown = ""
        if self.terminal is not None:
            self.terminal.close()
            self.terminal = None
