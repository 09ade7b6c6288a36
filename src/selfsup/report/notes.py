"""The report's words for HTML, Markdown and the W&B Report alike: title, counts, code and settings lines, notes."""

from __future__ import annotations

from selfsup.common.version import describe
from selfsup.report.model import Run, _show
from selfsup.report.tables import JOB_COLUMNS, LM_EVAL_COLUMNS
from selfsup.results.summary import DEFINITIONS, JOB_NOTE, LM_EVAL_NOTE

COMPARISON_NOTE = (
    "Compare runs on the columns that do not depend on their settings. A run's own val loss grades it on its own "
    "exam (its mask rate, its span length, its objective's scored positions), so it says how well the run learned "
    "that task, not which setting is better: never rank mask rates, span lengths or objectives by it. "
    "The fixed-exam loss (eval/fixed/loss) scores every run of a family on the same panel of tasks with the same "
    "masks, the mean of its members (encoders: MLM at mask rates 0.10 to 0.40; encoder-decoders: span corruption "
    "at rates 0.10 to 0.50 and mean spans 2 to 10; decoders: next-token loss), so that no swept value is scored on "
    "its own exam alone: compare it across mask rates, span lengths and seeds within a family, after the pairs and "
    'the probe (docs/evaluation.md, "Which score for which sweep"). The minimal pairs (eval/pairs/accuracy) '
    "and the probe (eval/probe/accuracy) score every family on the same examples: compare objectives by their "
    "margins over random-init (the same score on untrained models of the same shape), never by raw accuracies, "
    "at equal steps, tokens seen or FLOPs. The verdict below says which runs show pretraining (the margin's 95% "
    "interval above 0 at every seed) and calls a lead only when the difference of two margins exceeds its own "
    "interval and the spread over seeds: run seed=0,1,2."
)
VALUES_NOTE = (
    "Values, as the end-of-sweep table shows them: " + DEFINITIONS + ". Read from (column data): the W&B run "
    "files (offline runs, with `wandb leet inspect`), the W&B API (online runs), else csv/metrics.csv, else "
    "(logger=none) summary.json."
)


TASK_NOTE = (
    "Each evaluation task (the built-in probe, and every eval.tasks.NAME) beside its baselines: the "
    "majority class's accuracy, and random-init: the same probe on untrained models of the run's shape "
    "(mean +- sd over seeds); the margin is the accuracy minus random-init, with its paired bootstrap 95% "
    "interval; and the simple baseline a reviewer asks for first, TF-IDF features and a logistic regression "
    "(sentence pairs: each text's TF-IDF, their product and word overlap), with its accuracy's interval and the "
    "run's difference from it, paired over the same test examples."
)


EVALUATED_NOTE = (
    "Scored after training by selfsup-eval (evaluated.json beside each run's summary.json): each task by its protocol "
    "(fine-tuned: the mean over fine-tuning seeds), beside the same on untrained models of the run's shape "
    "(random-init, mean +- sd over seeds) and the majority class; the margin's paired bootstrap 95% interval "
    "resamples the test examples, the random-init seeds and the fine-tuning seeds. settings: what made the run's "
    "scores of that table (its protocol, steps, seeds, lengths and examples; lm-eval's version and settings), as "
    "evaluated.json records them; runs scored under different settings are judged on separate lines of the verdict."
)


def code_line(runs: list[Run]) -> str:
    """Which code the runs ran (summary.json's `code`): one version, or each with its runs."""
    versions: dict[str, list[str]] = {}
    for run in runs:
        versions.setdefault(describe(run.summary.get("code")), []).append(run.label)
    if len(versions) == 1:
        return f"Code: {next(iter(versions))}."
    return "Code: " + "; ".join(f"{v} ({', '.join(labels)})" for v, labels in versions.items()) + "."


def fixed_line(setup: dict) -> str:
    fixed = setup.get("fixed") or {}
    return "; ".join(f"{k}={_show(v)}" for k, v in fixed.items()) or "none"


def _title(runs: list[Run]) -> str:
    sweeps = list(dict.fromkeys(str(r.sweep) for r in runs))
    return "selfsup report: " + ", ".join(sweeps)


def _counts(runs: list[Run]) -> str:
    failed = sum(not r.finished for r in runs)
    return f"{len(runs)} run{'s' if len(runs) != 1 else ''}" + (f", {failed} not finished" if failed else "")


PREDICTIONS_NOTE = (
    "The first examples of the fixed exam at each run's last evaluation (the same text windows and "
    "masks for every run of an architecture family): input is what the model reads, target the "
    "scored tokens (the first 24, separated by |), prediction the model's likeliest token at each."
)


WRITTEN_NOTE = (
    "What each run wrote on its generation jobs' shown test examples (eval.generation.<job>.examples_shown, the "
    "same examples for every run, drawn by the eval seed), beside the reference and what an untrained model of the "
    "run's shape wrote after the same fine-tuning (random-init seed 0); F1: the run's token F1 on the example. "
    "All of them are in each run's evaluated.json (written_examples)."
)


PER_CLASS_NOTE = (
    "Each selfsup-eval task's classes: accuracy is the share of a class's test examples the run predicts as that "
    "class, F1 the class's F1, both from the confusion matrix summed over fine-tuning seeds (in evaluated.json's "
    "per_class, with the matrix; a task of more than 2 classes has its matrices plotted under Plots)."
)


def evaluated_note(tables: list[tuple]) -> str:
    """EVALUATED_NOTE, and JOB_NOTE and LM_EVAL_NOTE where a generation job or an lm-eval task was evaluated."""
    jobs = any(columns[: len(JOB_COLUMNS)] == JOB_COLUMNS for _, columns, _ in tables)
    lm_eval = any(columns[: len(LM_EVAL_COLUMNS)] == LM_EVAL_COLUMNS for _, columns, _ in tables)
    return (
        EVALUATED_NOTE
        + (" Generation jobs: " + JOB_NOTE + "." if jobs else "")
        + (" " + LM_EVAL_NOTE + "." if lm_eval else "")
    )
