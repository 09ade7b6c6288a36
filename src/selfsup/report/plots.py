"""The report's plots as (name, caption, PNG bytes): which figures a report draws, and their captions."""

from __future__ import annotations

from selfsup.common.names import PAIRS, PROBE
from selfsup.report.figures import (
    _png,
    _pyplot,
    confusion_figure,
    curves_figure,
    knob_figure,
    setting_figure,
    study_history_figure,
)
from selfsup.report.model import MASK_RATE, SPAN_LENGTH, Run, _finite, _number
from selfsup.report.plot_data import BASELINES, METRIC_KEYS, baselines, setting_of, trial_baseline
from selfsup.report.studies import study_importances
from selfsup.report.tables import per_class_results


def baseline_words(found: list[dict]) -> str:
    """`Baselines: random-init (mean ± sd band), majority class.` for a caption; '' without any."""
    names = list(dict.fromkeys(BASELINES[b["kind"]].replace("(mean ± sd)", "(mean, ± sd band)") for b in found))
    return f" Baselines: {', '.join(names)}." if names else ""


BAND_WORDS = "seeds: their mean, with a band of their min-max (2 seeds) or the 95% interval of the mean (3 or more)"


def plot_loss_vs_tokens(runs: list[Run], keys: list[str] | None = None, key: str = "val/loss") -> bytes | None:
    """A loss against tokens seen, one colour per setting (`curve_series`): seeds as their mean and a band
    (seed_band); a series of one point is left out, and None when none has two."""
    what = "Validation" if key.startswith("val/") else "Training"
    ylabel, xlabel = key.replace("/", " ").replace("_", " "), "tokens seen (train/tokens_seen)"
    fig, _ = curves_figure(runs, key, "train/tokens_seen", ylabel, xlabel, f"{what} loss against tokens seen", keys)
    return None if fig is None else _png(fig)


def plot_study(study) -> list[tuple[str, str, bytes]]:
    """An Optuna study: its optimisation history (each trial's value and the best so far) and, with two
    complete trials or more, and from studies.MIN_IMPORTANCE_TRIALS complete trials the parameters' importances
    (studies.study_importances). Under two complete trials: a line saying
    the history is not drawn (empty png)."""
    from optuna.trial import TrialState

    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    if not complete:
        return []
    fig = study_history_figure(study)
    if fig is None:
        return [
            (
                "optuna_history",
                (
                    f"Optuna study {study.study_name}: its history is not drawn: one complete "
                    f"trial (value {complete[0].value:.4f})."
                ),
                b"",
            )
        ]
    with_se = any(_finite(_number(t.user_attrs.get("value_se"))) for t in complete)
    with_baseline = any(trial_baseline(t) is not None for t in complete)
    plt = _pyplot()
    plots = [
        (
            "optuna_history",
            f"Optuna study {study.study_name}: each complete trial's value (the jobs' "
            f"optimized metric)"
            + (" with its standard error (its seeds' spread, or the test examples')" if with_se else "")
            + ", the best so far, and the pruned trials."
            + (" Baselines: random-init (mean, ± sd band)." if with_baseline else ""),
            _png(fig),
        )
    ]
    importances, line = study_importances(study)  # None under MIN_IMPORTANCE_TRIALS complete trials
    if importances:
        fig, ax = plt.subplots(figsize=(7.5, 0.5 + 0.45 * len(importances)))
        names = list(importances)[::-1]
        ax.barh(names, [importances[n] for n in names], color="#2ca02c")
        ax.set_xlabel("importance (Optuna's default evaluator)")
        ax.set_title("Which parameters the value depends on")
        plots.append(("optuna_importances", line, _png(fig)))
    return plots


KNOBS = [
    (MASK_RATE, "mask_rate", "mask rate (objective.mask_rate)", {"mlm", "span_corruption", "bart"}),
    (SPAN_LENGTH, "span_length", "mean span length (objective.mean_span_length)", {"span_corruption"}),
]
COMPARABLE = [  # (Run.metrics() name, plot name, axis label, the score in a sentence, how to read it)
    (
        "fixed_loss",
        "fixed_loss",
        "fixed-exam loss (eval/fixed/loss)",
        "fixed-exam loss",
        "lower is better; the same windows and masks for every run of a family",
    ),
    (
        "heldout",
        "heldout",
        "held-out text, bits per byte (eval/heldout/bits_per_byte)",
        "held-out text's bits per byte",
        "lower is better; scored by the family's scorer",
    ),
    (
        "pairs",
        "pairs",
        "minimal-pairs accuracy (eval/pairs/accuracy)",
        "minimal-pairs accuracy",
        "higher is better; the same pairs for every run",
    ),
    ("probe", "probe", "probe accuracy (eval/probe/accuracy)", "downstream probe's accuracy", "higher is better"),
]


def reading(metric: str) -> str:
    """What a figure's whiskers and floor are, in sentences (the verdict's rules)."""
    if METRIC_KEYS[metric].endswith("/accuracy"):
        return (
            " Whiskers: each run's 95% interval, the one the verdict reads (its margin over random-init's interval, "
            "drawn around the accuracy). The random-init line is the verdict's floor: a run shows pretraining when "
            "its whole whisker lies above it."
        )
    return (
        " Whiskers: each run's 95% bootstrap interval, the one the verdict reads. A run whose whole whisker lies "
        "above the unigram line is worse than a unigram count model."
    )


def settings_words(runs: list[Run], keys: list[str]) -> str:
    """` Settings: mlm mask_rate=0.1; mlm mask_rate=0.4.` (the verdict's names, a colour each)."""
    return f" Settings: {'; '.join(dict.fromkeys(setting_of(r, keys) for r in runs))}."


def plot_confusions(runs: list[Run], keys: list[str], most: int = 6) -> list[tuple[str, str, bytes]]:
    """Each selfsup-eval task of more than 2 classes: its confusion matrices, a panel per run."""
    plots = []
    for task, results in per_class_results(runs, keys).items():
        if len(results[0][1]["classes"]) <= 2:
            continue
        left = f" (the first {most} of {len(results)} runs; all in evaluated.json)" if len(results) > most else ""
        caption = (
            f"Task {task}: which class each run predicts for each true class's test examples (a row's shares sum to "
            f"1; summed over fine-tuning seeds){left}. The diagonal is each class's accuracy."
        )
        plots.append((f"confusion_{task}", caption, _png(confusion_figure(task, results, most))))
    return plots


def make_plots(runs: list[Run], keys: list[str]) -> list[tuple[str, str, bytes]]:
    """[(name, caption, png bytes)]; a plot not drawn is (name, the line saying why, b"")."""
    plots = []
    for key, name in (("val/loss", "val_loss_vs_tokens"), ("train/loss", "train_loss_vs_tokens")):
        png = plot_loss_vs_tokens(runs, keys, key)
        if png:
            plots.append(
                (
                    name,
                    (
                        f"Each run's own {key.split('/')[0]} loss against tokens seen, a colour per setting "
                        f"({BAND_WORDS}; dashed: a run that did not finish): how it trained on its own exam, not "
                        f"a comparison across settings."
                    ),
                    png,
                )
            )
    compared = "objectives" if len({r.objective for r in runs}) > 1 else "settings"
    for key, name, what in ((PROBE, "probe", "probe accuracy"), (PAIRS, "pairs", "minimal-pairs accuracy")):
        single = []
        for axis, axis_name, label in (
            ("train/tokens_seen", "tokens", "tokens seen (train/tokens_seen)"),
            ("train/flops_seen", "flops", "training FLOPs (train/flops_seen)"),
        ):
            fig, left_out = curves_figure(
                runs,
                key,
                axis,
                f"{what} ({key})",
                label,
                f"{what.capitalize()} against {label.split(' (')[0]}",
                keys,
                True,
            )
            if fig is None:
                single += [label.split(" (")[0]] if left_out else []
                continue
            caption = (
                f"{what.capitalize()} ({key}) against {label}, a colour per setting ({BAND_WORDS}; a point per "
                f"evaluation): the {compared} compared at equal text or equal compute."
                + baseline_words(baselines(runs, key))
                + (f" Left out (evaluated once): {', '.join(left_out)}." if left_out else "")
            )
            plots.append((f"{name}_vs_{axis_name}", caption, _png(fig)))
        if single:
            why = (
                f"{what.capitalize()} against {' and '.join(single)}: not drawn, the evaluation ran once per run "
                f"(one point per setting, no curve); eval.every_n_validations=1 evaluates at every validation."
            )
            plots.append((f"{name}_vs_tokens", why, b""))
    for x_key, x_name, x_label, objectives in KNOBS:
        for metric, name, y_label, noun, how in COMPARABLE:
            fig, scattered = knob_figure(
                runs,
                keys,
                x_key,
                objectives,
                metric,
                f"{noun.capitalize()} against {x_label.split(' (')[0]}",
                x_label,
                y_label,
            )
            if fig is not None:
                chosen = [r for r in runs if r.objective in objectives and r.finished]
                joined = (
                    "each point is a run, no line joins them (the other swept values differ from run to run)"
                    if scattered
                    else "each point is a run, a grey line joins the means over seeds"
                )
                caption = (
                    f"The final {noun} ({how}) against {x_label}: {joined}, a colour per setting."
                    + reading(metric)
                    + baseline_words(baselines(chosen, METRIC_KEYS[metric]))
                    + settings_words(chosen, keys)
                )
                plots.append((f"{name}_vs_{x_name}", caption, _png(fig)))
    for metric, name, y_label, noun, how in COMPARABLE[2:]:  # the fixed exams and scorers differ by family
        fig = setting_figure(runs, keys, metric, f"{noun.capitalize()} by setting", y_label)
        if fig is not None:
            chosen = [r for r in runs if r.finished]
            caption = (
                f"The final {noun} ({how}) per setting: each run a point, side by side, each setting beside its "
                f"architecture's baselines; compare the margins over random-init, not the raw accuracies."
                + reading(metric)
                + baseline_words(baselines(runs, METRIC_KEYS[metric]))
                + settings_words(chosen, keys)
            )
            plots.append((f"{name}_by_setting", caption, _png(fig)))
    return plots + plot_confusions(runs, keys)
