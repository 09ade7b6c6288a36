"""The names a run writes and the lab reads back: metric keys, the files of a run dir, the key of a Hydra
override, and RunSummary, the one reader and writer of a run's summary.json."""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

# the model families: an architecture's name, and what an objective trains and an evaluation scores
ENCODER, DECODER, ENCODER_DECODER = "encoder", "decoder", "encoder_decoder"
FAMILIES = (ENCODER, DECODER, ENCODER_DECODER)

# metrics, as logged (W&B, csv/metrics.csv) and kept in summary.json's "eval"
VAL_LOSS, VAL_PERPLEXITY, VAL_ACCURACY = "val/loss", "val/perplexity", "val/accuracy"
FIXED_LOSS = "eval/fixed/loss"
HELDOUT_BPB = "eval/heldout/bits_per_byte"
PAIRS, PAIRS_MARGIN = "eval/pairs/accuracy", "eval/pairs/margin"
PROBE = "eval/probe/accuracy"

# the files of a run dir
SUMMARY = "summary.json"  # RunSummary: written when the run ends (finished, failed or stopped)
ERROR = "error.txt"  # the one-line error of a failed run
TRACEBACK = "traceback.txt"  # a failed sweep job's traceback (a bug, not a user's mistake)
OUTCOMES = "outcomes.npz"  # the evaluation's per-example outcomes (selfsup.results.verdict)
EVALUATED = "evaluated.json"  # selfsup-eval's scores of the run (selfsup.tools.evaluate), beside summary.json
EVALUATED_OUTCOMES = "evaluated_outcomes.npz"  # their per-example outcomes
TOKENIZER = "tokenizer.json"

# the run dir's folders and the records beside its results (paths relative to the run dir)
HYDRA_DIR = ".hydra"  # Hydra's records of the command (a resume's: .hydra/resume-<time>/)
RECORDED_CONFIG = f"{HYDRA_DIR}/config.yaml"  # the job's composed config
HYDRA_RECORD = f"{HYDRA_DIR}/hydra.yaml"  # Hydra's own settings and the config groups chosen
RESOLVED_CONFIG = f"{HYDRA_DIR}/resolved.yaml"  # what the ranks > 0 of a ddp or fsdp job train from
CHECKPOINTS = "checkpoints"  # best-stepNNNNNN.ckpt and last.ckpt
LAST_CKPT = "last.ckpt"  # the checkpoint a resume continues from
LAST_CHECKPOINT = f"{CHECKPOINTS}/{LAST_CKPT}"
CSV_DIR = "csv"  # metrics.csv (a resume's: csv/resume-N/metrics.csv)
METRICS_CSV = f"{CSV_DIR}/metrics.csv"
WANDB_DIR = "wandb"  # the W&B run files
WANDB_RUN_ID = "wandb-run-id"  # the W&B run a resume continues
WANDB_IDENTITY = "wandb-identity.json"  # its name, group and tags
MULTIRUN = "multirun.yaml"  # a sweep dir's record of the sweep

log = logging.getLogger("selfsup")


def override_key(override: str) -> str:
    """The key a Hydra override sets: `+trainer.max_steps=3`, `++seed=1`, `~eval.tasks` -> the key alone."""
    return override.split("=", 1)[0].lstrip("+~")


def shown(value) -> str:
    """A setting's value as run names, tags, job lines, the report and the verdict show it: a number to 4
    significant digits (Optuna's sampled 0.29696607676729614 as 0.297), an integer and any other text as they are."""
    text = str(value)
    try:
        number = float(text)
    except ValueError:
        return text
    return text if re.fullmatch(r"-?\d+", text) else f"{number:.4g}"


def _strict(value):
    """NaN and infinities as null: summary.json is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    return [_strict(v) for v in value] if isinstance(value, list) else value


NUMBERS = (
    "steps", "val_loss", "val_perplexity", "val_accuracy", "signal_per_token", "tokens_seen", "targets_seen",
    "flops_seen", "parameters", "wall_seconds", "eval_seconds", "tokens_per_sec",
)  # fmt: skip
TEXTS = ("status", "objective", "architecture", "run_dir", "error")
SCORES = (
    "/accuracy", "/accuracy_se", "/margin", "/margin_low", "/margin_high", "/margin_examples", "/loss", "/loss_low",
    "/loss_high", "/unigram_gap_low", "/random_init_accuracy", "/bits_per_byte", "/bits_per_byte_low",
    "/bits_per_byte_high", "/tfidf_accuracy", "/tfidf_accuracy_low", "/tfidf_accuracy_high", "/vs_tfidf",
    "/vs_tfidf_low", "/vs_tfidf_high", "/vs_copy", "/vs_copy_low", "/vs_copy_high", "/vs_frequent",
    "/vs_frequent_low", "/vs_frequent_high",
)  # fmt: skip


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def mistyped(values: dict) -> str | None:
    """What is wrong with a summary.json's values (a number that is text or not finite, an eval that is not
    {metric: number}), in one line; None when the values the lab reads have their types."""
    for key in NUMBERS:
        if values.get(key) is not None and not _number(values[key]):
            return f"{key} is {values[key]!r}, not a finite number"
    for key in TEXTS:
        if values.get(key) is not None and not isinstance(values[key], str):
            return f"{key} is {values[key]!r}, not text"
    evaluated = values.get("eval")
    if evaluated is not None and not isinstance(evaluated, dict):
        return f"eval is a {type(evaluated).__name__}, not {{metric: number}}"
    for key, value in (evaluated or {}).items():  # the scores the table and the verdict read
        if key.endswith(SCORES) and value is not None and not _number(value):
            return f"eval {key} is {value!r}, not a finite number"
    return None


@dataclass
class RunSummary:
    """A run dir's summary.json: what a run reports when it ends (status, objective, architecture, steps,
    val_loss, eval: {metric: value}, checkpoints, ...), as the dict `values`.

    read() never raises: a missing file gives `found=False`; a torn or foreign one gives `problem` (one line)
    and empty values. write() is atomic, so the file is valid or absent."""

    values: dict = field(default_factory=dict)
    found: bool = False
    problem: str | None = None

    @classmethod
    def read(cls, run_dir: Path | str | None) -> RunSummary:
        path = Path(run_dir) / SUMMARY if run_dir is not None else None
        if path is None or not path.is_file():
            return cls()
        try:
            values = json.loads(path.read_text())
        except (OSError, ValueError) as err:  # (a torn write, binary garbage: UnicodeDecodeError)
            return cls(found=True, problem=str(err).splitlines()[0] if str(err) else type(err).__name__)
        if not isinstance(values, dict):
            return cls(found=True, problem=f"a JSON {type(values).__name__}, not an object")
        wrong = mistyped(values)
        if wrong:
            return cls(found=True, problem=wrong)
        return cls(values, found=True)

    def write(self, run_dir: Path) -> None:
        """summary.json as strict JSON, written atomically (a full disk keeps the previous file, with a warning);
        a finished run's stale error.txt goes."""
        run_dir = Path(run_dir)
        try:
            write_json(run_dir / SUMMARY, self.values)
            if self.values.get("status") == "finished":
                (run_dir / ERROR).unlink(missing_ok=True)
        except OSError as err:
            log.warning(f"could not write {run_dir / SUMMARY}: {err.strerror}")


def write_json(path: Path, values) -> None:
    """`values` as strict JSON (NaN as null) in `path`, written atomically: the file is the old one or the new one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps(_strict(values), indent=2, allow_nan=False))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
