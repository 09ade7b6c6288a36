"""The verdict's inputs: runs grouped by setting, their margins and losses, and their per-example outcomes."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from selfsup.common.names import EVALUATED, OUTCOMES, SUMMARY, shown
from selfsup.evaluation.generation import SCORES
from selfsup.evaluation.stats import Interval, exam_ratio


@dataclass
class Group:
    """The runs of one setting (its seeds)."""

    label: str
    rows: list[dict]

    def margins(self, key: str) -> list[Interval]:
        return [m for m in (run_margin(row, key) for row in self.rows) if m is not None]

    def examples(self, key: str) -> int | None:
        """The fewest test examples any of the group's margins of `key` was measured on (None: not recorded)."""
        found = [(row.get("eval") or {}).get(f"{key}/margin_examples") for row in self.rows]
        found = [int(n) for n in found if isinstance(n, (int, float)) and math.isfinite(n)]
        return min(found) if found else None

    def spread(self, key: str) -> float | None:
        """The range of the group's margins over its seeds; None with one seed."""
        values = [m.value for m in self.margins(key)]
        return max(values) - min(values) if len(values) > 1 else None


def run_margin(row: dict, key: str) -> Interval | None:
    evaluated = row.get("eval") or {}
    if f"{key}/margin" not in evaluated:
        return None
    return Interval(evaluated[f"{key}/margin"], evaluated[f"{key}/margin_low"], evaluated[f"{key}/margin_high"])


def score_keys(row: dict) -> list[str]:
    """The scores of a run that have margins: each minimal-pairs scorer and set, then each probe task."""
    evaluated = row.get("eval") or {}
    keys = list(row.get("pairs_scorers") or {})
    keys += [k.removesuffix("/margin") for k in evaluated if k.endswith("/margin") and not k.startswith("eval/pairs")]
    return [k for k in keys if f"{k}/margin" in evaluated]


def setting_label(row: dict) -> str:
    """What a row's run was, seed aside: its objective (a continued run: its chain, `clm 600 → mlm 600`) and swept
    values (an experiment's arm=NAME aside: the objective or chain says what the arm trained)."""
    swept = {k: v for k, v in (row.get("swept") or {}).items() if k not in ("seed", "arm")}
    parts = [f"{k.split('.')[-1]}={shown(v)}" for k, v in swept.items()]
    return " ".join([row.get("chain") or row.get("objective") or "?", *parts])


def stages(rows: list[dict]) -> set[str]:
    """The run dirs of rows that another row continues (init.from=RUN_DIR): a stage of that row's chain, which
    stands for it as one arm."""
    return {str(Path(r["parent"]["run_dir"]).resolve()) for r in rows if (r.get("parent") or {}).get("run_dir")}


def is_stage(row: dict, staged: set[str]) -> bool:
    return bool(row.get("run_dir")) and str(Path(row["run_dir"]).resolve()) in staged


def groups_of(rows: list[dict]) -> list[Group]:
    found: dict[str, list[dict]] = {}
    staged = stages(rows)
    for row in rows:
        if row.get("status") == "finished" and row.get("eval") and not is_stage(row, staged):
            found.setdefault(setting_label(row), []).append(row)
    return [Group(label, members) for label, members in found.items()]


# ------------------------------------------------------------------------------------------ the per-example outcomes
class Contradiction(str):
    """What load_outcomes found wrong when a run's outcomes and the scores its summary records disagree (an edited
    accuracy, margin or interval): the verdict leaves that run out and says why. Other problems (an unreadable
    file) are plain strings: the run's margins are shown, its comparisons not bounded."""


def with_margins(outcomes: dict[str, np.ndarray], evaluated: dict) -> dict[str, np.ndarray]:
    """The outcomes to save, with each score's margin and interval as recorded beside them (K|margin: [value, low,
    high]): load_outcomes checks the summary's interval against it, its value against the outcomes themselves."""
    out = dict(outcomes)
    for key in [k for k in outcomes if "|" not in k]:
        found = [evaluated.get(f"{key}/margin{end}") for end in ("", "_low", "_high")]
        if None not in found:
            out[f"{key}|margin"] = np.asarray(found, dtype=np.float64)
    return out


def load_outcomes(row: dict) -> dict[str, np.ndarray] | str | None:
    """A run's per-example outcomes (selfsup.evaluation.Evaluation.outcomes) from its run dir, checked against its
    summary (selfsup-eval's: evaluated.json against evaluated_outcomes.npz): None where it kept none, else what is
    wrong with them in a few words (read by compare; a Contradiction where they disagree)."""
    path = Path(row.get("outcomes_path") or Path(row.get("run_dir") or "") / OUTCOMES)  # selfsup-eval's: their own
    if not (row.get("run_dir") or row.get("outcomes_path")) or not path.is_file():
        return None
    summary = EVALUATED if row.get("outcomes_path") else SUMMARY
    try:
        with np.load(path, allow_pickle=False) as data:
            found = {k: data[k] for k in data.files}
    except Exception as err:  # noqa: BLE001 - a truncated zip (BadZipFile), a damaged array: said, not raised
        return f"outcomes.npz unreadable ({type(err).__name__})"
    evaluated = row.get("eval") or {}
    for key in [k for k in found if "|" not in k]:
        trained, untrained = found[key], found.get(f"{key}|random_init")
        if (
            trained.ndim not in (1, 2)
            or untrained is None
            or untrained.ndim != 2
            or untrained.shape[1] != trained.shape[-1]
        ):
            return "outcomes.npz holds arrays of the wrong shape"
        if not (np.issubdtype(trained.dtype, np.number) and np.issubdtype(untrained.dtype, np.number)):
            return "outcomes.npz holds values that are not numbers"
        if not (np.isfinite(trained).all() and np.isfinite(untrained).all()):
            return "outcomes.npz holds values that are not finite"
        for array, expected in expected_means(key, trained, untrained, evaluated):
            if expected is not None and not close(float(array.mean()), expected):
                return Contradiction(f"outcomes do not match {summary}")
        wrong = margin_contradiction(key, found, evaluated)
        if wrong:
            return Contradiction(f"outcomes do not match {summary}'s {wrong}")
    return _check_exam(found, evaluated, summary) or found


def checked(row: dict) -> dict:
    """A finished run's row as read, or, where its summary's scores contradict its outcomes (load_outcomes), the row
    without its scores, saying why (`left_out`: the tables show none of them, the verdict names the run)."""
    wrong = load_outcomes(row) if row.get("status") == "finished" and row.get("eval") else None
    return {**row, "eval": {}, "left_out": str(wrong)} if isinstance(wrong, Contradiction) else row


def close(found: float, expected) -> bool:
    return isinstance(expected, (int, float)) and abs(found - expected) <= 1e-6 * max(1.0, abs(expected))


def margin_contradiction(key: str, found: dict, evaluated: dict) -> str | None:
    """Which of score `key`'s margin, low or high the summary records otherwise than its outcomes say (the margin:
    the outcomes' mean minus their random-init mean; its interval: as recorded beside them, K|margin), or None."""
    recorded = [evaluated.get(f"{key}/margin{end}") for end in ("", "_low", "_high")]
    if recorded == [None] * 3:
        return None
    trained = np.asarray(found[key], dtype=np.float64)
    expected = [float(trained.mean() - np.asarray(found[f"{key}|random_init"], dtype=np.float64).mean())]
    stored = found.get(f"{key}|margin")
    if stored is not None and stored.shape == (3,) and np.issubdtype(stored.dtype, np.number):
        expected += [float(stored[1]), float(stored[2])]
    for end, value, want in zip(("margin", "margin_low", "margin_high"), recorded, expected):
        if not close(want, value):
            return f"{key}/{end}"
    return None


def expected_means(key: str, trained, untrained, evaluated: dict) -> list:
    """(outcomes, the mean the summary records of them) of score `key`: a task's accuracy and random-init accuracy;
    a generation job's score (eval/<job>/<score>) and random_init_<score>, a loss negated (its outcomes are the
    higher the better)."""
    if key.count("/") != 2 or key.rpartition("/")[2] not in SCORES or key.startswith("eval/pairs/"):
        return [(trained, evaluated.get(f"{key}/accuracy")), (untrained, evaluated.get(f"{key}/random_init_accuracy"))]
    sign = -1.0 if key.endswith("/loss") else 1.0
    job, score = key.rsplit("/", 1)
    found = [evaluated.get(key), evaluated.get(f"{job}/random_init_{score}")]
    return [(a, None if v is None else sign * v) for a, v in zip((trained, untrained), found)]


def _check_exam(found: dict, evaluated: dict, summary: str = SUMMARY) -> str | None:
    """What is wrong with the per-unit arrays of outcomes.npz of each sitting (None: nothing, or none kept)."""
    for sitting in SITTINGS:
        at = sitting.prefix + "|"
        if at + "nll" not in found:
            continue
        arrays = [found.get(at + k) for k in ("nll", "count", "member")]
        arrays = [a for a in arrays if a is not None] + ([found[at + "unigram"]] if at + "unigram" in found else [])
        if len(arrays) < 3 or any(a.ndim != 1 or a.shape != arrays[0].shape for a in arrays):
            return f"outcomes.npz holds {sitting.title} arrays of the wrong shape"
        if not all(np.issubdtype(a.dtype, np.number) and np.isfinite(a).all() for a in arrays):
            return f"outcomes.npz holds {sitting.title} values that are not finite numbers"
        expected = evaluated.get(sitting.key)
        found_value = exam_ratio(*arrays[:3]) * sitting.scale if arrays[1].any() else None
        if (
            expected is not None
            and found_value is not None
            and abs(found_value - expected) > 1e-6 * max(1.0, abs(expected))
        ):
            return Contradiction(f"{sitting.title} outcomes do not match {summary}")
    return None


def pooled(group: Group, key: str, outcomes: dict) -> tuple[np.ndarray, np.ndarray, str] | str | None:
    """The group's outcomes on `key`: trained [n] or [fine-tuning seeds, n] (the mean over its pretraining
    seeds), random-init [seeds, n] (shared by
    the runs of a shape), and the examples' hash; None where a run kept none or its runs saw other examples; what
    is wrong with a run's outcomes (load_outcomes)."""
    kept = [outcomes.get(id(row)) for row in group.rows]
    wrong = [o for o in kept if isinstance(o, str)]
    if wrong:
        return wrong[0]
    if any(o is None or key not in o or f"{key}|random_init" not in o for o in kept):
        return None
    examples = {str(o[f"{key}|examples"]) for o in kept}
    if len(examples) != 1 or len({o[key].shape for o in kept}) != 1:
        return None
    return np.mean([o[key] for o in kept], axis=0), kept[0][f"{key}|random_init"], examples.pop()


# ------------------------------------------------------------------------------------------ the fixed exam, the text
@dataclass(frozen=True)
class Sitting:
    """A score that is a ratio over shared units (the fixed exam's windows, the held-out text's documents), lower
    is better, compared within a family: its metric and the words the verdict says of it."""

    prefix: str  # eval/fixed: its outcomes are <prefix>|nll, |count, |member, |unigram, |examples
    metric: str  # <prefix>/<metric>, _low, _high in summary.json
    title: str
    unit: str
    scale: float  # the metric per unit of the arrays' ratio (nats): 1, or 1 / ln 2 for bits
    units: str  # what the per-unit arrays are, in a reason

    @property
    def key(self) -> str:
        return f"{self.prefix}/{self.metric}"


SITTINGS = (
    Sitting("eval/fixed", "loss", "fixed exam", "loss in nats", 1.0, "per-window sums"),
    Sitting("eval/heldout", "bits_per_byte", "held-out text", "bits per byte", 1 / math.log(2), "per-document sums"),
)


def exam_of(row: dict, sitting: Sitting = SITTINGS[0]) -> Interval | None:
    """A run's score on a sitting (the fixed exam's loss, the held-out text's bits per byte) with its interval;
    None without both."""
    evaluated = row.get("eval") or {}
    value, low, high = (evaluated.get(sitting.key + end) for end in ("", "_low", "_high"))
    return None if None in (value, low, high) else Interval(value, low, high, signed=False)


def exam_spread(group: Group, sitting: Sitting) -> float | None:
    values = [exam_of(row, sitting).value for row in group.rows]
    return max(values) - min(values) if len(values) > 1 else None


def exam_mean(group: Group, sitting: Sitting) -> float:
    return statistics.fmean(exam_of(row, sitting).value for row in group.rows)


def pooled_exam(group: Group, sitting: Sitting, outcomes: dict) -> tuple | str | None:
    """The group's per-unit sums, the mean over its seeds (nll), with the units' counts and members and the
    sitting's hash; None where a run kept none or its runs sat others; what is wrong (load_outcomes)."""
    kept = [outcomes.get(id(row)) for row in group.rows]
    wrong = [o for o in kept if isinstance(o, str)]
    if wrong:
        return wrong[0]
    at = sitting.prefix + "|"
    if any(o is None or at + "nll" not in o for o in kept):
        return None
    first = kept[0]
    same = all(
        str(o[at + "examples"]) == str(first[at + "examples"])
        and np.array_equal(o[at + "count"], first[at + "count"])
        and np.array_equal(o[at + "member"], first[at + "member"])
        for o in kept
    )
    if not same:
        return None
    nll = np.mean([o[at + "nll"] for o in kept], axis=0)
    return nll, first[at + "count"], first[at + "member"], str(first[at + "examples"])


def same_exam(x: tuple, y: tuple) -> bool:
    return x[3] == y[3] and np.array_equal(x[1], y[1]) and np.array_equal(x[2], y[2])
