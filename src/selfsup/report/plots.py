"""The report's plots (matplotlib, imported only when there is something to plot), as PNG bytes."""

from __future__ import annotations

import io

from selfsup.report.model import (
    MASK_RATE,
    PROBE,
    SEED,
    SPAN_LENGTH,
    ReportError,
    Run,
    _finite,
    _number,
    _show,
)

OBJECTIVE_COLORS = {"mlm": "#1f77b4", "clm": "#d62728", "span_corruption": "#2ca02c", "prefix_lm": "#9467bd",
                    "ul2": "#ff7f0e"}
EXTRA_COLORS = ["#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def _colors(runs: list[Run]) -> dict[str, str]:
    colors, extra = {}, iter(EXTRA_COLORS * 10)
    for run in runs:
        name = run.objective or "?"
        if name not in colors:
            colors[name] = OBJECTIVE_COLORS.get(name) or next(extra)
    return colors


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ReportError("selfsup-report needs matplotlib for its plots: pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def setting_of(run: Run, keys: list[str]) -> str:
    """A run's setting, seed aside: its objective and the swept values (one colour and legend entry each)."""
    return _group_label(run, [k for k in keys if k != SEED])


def curve_series(runs: list[Run], y_key: str, x_key: str, keys: list[str] | None = None) -> list[dict]:
    """The lines of a curve plot: one per setting (objective and swept values, seed aside). A setting with
    several finished seeds is their mean over the x values they share (else, x differing by seed, evaluation by
    evaluation, x the mean too), with the min-max as `low`/`high`; a
    single run, or a run that did not finish (dashed), is its own line.
    [{label, x, y, low, high, dashed, setting}]"""
    import numpy as np
    keys = keys or []
    settings: dict[str, list] = {}
    for run in runs:
        points = run.curve(y_key, x_key)
        if points:
            settings.setdefault(setting_of(run, keys), []).append((run, points))
    series = []
    for label, members in settings.items():
        finished = [m for m in members if m[0].finished]
        for run, points in members:
            if not run.finished or len(members) == 1:
                xs, ys = map(list, zip(*points))
                series.append({"setting": label, "label": label if len(members) == 1 else None, "x": xs, "y": ys,
                               "low": None, "high": None, "dashed": not run.finished})
        if len(finished) > 1:
            grid = sorted(set.intersection(*(set(x for x, _ in p) for _, p in finished)))
            if grid:  # the x values the seeds share (tokens seen at a validation)
                values = np.array([[dict(p)[x] for x in grid] for _, p in finished])
            elif len({len(p) for _, p in finished}) == 1:  # x differs by seed (FLOPs of MLM): by evaluation
                grid = list(np.array([[x for x, _ in p] for _, p in finished]).mean(0))
                values = np.array([[y for _, y in p] for _, p in finished])
            else:
                for run, points in finished:
                    xs, ys = map(list, zip(*points))
                    series.append({"setting": label, "label": f"{label} ({run.label})", "x": xs, "y": ys,
                                   "low": None, "high": None, "dashed": False})
                continue
            series.append({"setting": label, "label": f"{label} (mean of {len(finished)} seeds)", "x": grid,
                           "y": list(values.mean(0)), "low": list(values.min(0)), "high": list(values.max(0)),
                           "dashed": False})
    return series


def plot_curves(runs: list[Run], y_key: str, x_key: str, ylabel: str, xlabel: str, title: str,
                keys: list[str] | None = None) -> bytes | None:
    """y against x, one colour per setting (`curve_series`): seeds as their mean and a min-max band."""
    series = curve_series(runs, y_key, x_key, keys)
    if not series:
        return None
    plt = _pyplot()
    colors = {setting: plt.cm.tab10(i % 10) for i, setting in enumerate(dict.fromkeys(s["setting"] for s in series))}
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for line in series:
        color = colors[line["setting"]]
        ax.plot(line["x"], line["y"], marker="o", markersize=3, linewidth=1.5, color=color,
                linestyle="--" if line["dashed"] else "-", alpha=0.9, label=line["label"])
        if line["low"] is not None:
            ax.fill_between(line["x"], line["low"], line["high"], color=color, alpha=0.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _png(fig)


def plot_loss_vs_tokens(runs: list[Run], keys: list[str] | None = None, key: str = "val/loss") -> bytes | None:
    what = "Validation" if key.startswith("val/") else "Training"
    return plot_curves(runs, key, "train/tokens_seen", key.replace("/", " ").replace("_", " "),
                       "tokens seen (train/tokens_seen)", f"{what} loss against tokens seen", keys)


def plot_study(study) -> list[tuple[str, str, bytes]]:
    """An Optuna study: its optimisation history (each trial's value and the best so far) and, with two
    complete trials or more, the parameters' importances (fANOVA)."""
    from optuna.trial import TrialState
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    if not complete:
        return []
    plt = _pyplot()
    maximize = study.direction.name == "MAXIMIZE"
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    numbers, values = [t.number for t in complete], [t.value for t in complete]
    best = [max(values[:i + 1]) if maximize else min(values[:i + 1]) for i in range(len(values))]
    ax.scatter(numbers, values, s=18, color="#1f77b4", label="trial value")
    ax.step(numbers, best, where="post", color="#d62728", label="best so far")
    pruned = [t.number for t in study.trials if t.state == TrialState.PRUNED]
    if pruned:
        ax.scatter(pruned, [min(values)] * len(pruned), marker="x", color="#7f7f7f", label="pruned")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("trial")
    ax.set_ylabel("objective value")
    ax.set_title(f"Optuna study {study.study_name}: optimisation history")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    plots = [("optuna_history", f"Optuna study {study.study_name}: each complete trial's value (the jobs' "
              f"optimized metric), the best so far, and the pruned trials.", _png(fig))]
    if len(complete) >= 2:
        import optuna
        importances = optuna.importance.get_param_importances(study)
        if importances:
            fig, ax = plt.subplots(figsize=(7.5, 0.5 + 0.45 * len(importances)))
            names = list(importances)[::-1]
            ax.barh(names, [importances[n] for n in names], color="#2ca02c")
            ax.set_xlabel("importance (fANOVA)")
            ax.set_title("Which parameters the value depends on")
            plots.append(("optuna_importances", "Parameter importances of the study (Optuna's fANOVA evaluator).",
                          _png(fig)))
    return plots


def _group_label(run: Run, keys: list[str]) -> str:
    parts = [run.objective or "?"] + [f"{k.split('.')[-1]}={_show(run.value(k))}" for k in keys
                                      if run.value(k) != "n/a"]
    return ", ".join(parts)


def plot_metric_vs_knob(runs: list[Run], keys: list[str], x_key: str, objectives: set[str], metric: str,
                        title: str, xlabel: str, ylabel: str) -> bytes | None:
    """A final metric (a key of Run.metrics()) against one config value: one line per setting of the other
    swept values (seed aside), points = mean over seeds, bars = min-max over seeds. None when fewer than 2
    distinct x values."""
    chosen = [r for r in runs if r.finished and r.objective in objectives and _finite(r.metrics()[metric])
              and _finite(_number(r.config.get(x_key)))]
    if len({_number(r.config.get(x_key)) for r in chosen}) < 2:
        return None
    other = [k for k in keys if k not in (x_key, SEED)]
    lines: dict[str, dict[float, list[float]]] = {}
    objective_of = {}
    for run in chosen:
        label = _group_label(run, other)
        lines.setdefault(label, {}).setdefault(_number(run.config[x_key]), []).append(run.metrics()[metric])
        objective_of[label] = run.objective
    plt = _pyplot()
    colors = _colors(runs)
    one_objective = len(set(objective_of.values())) == 1
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    same_objective: dict[str, int] = {}
    markers, styles = "osD^v<>ph*", ["-", "--", ":", "-."]
    for i, (label, points) in enumerate(lines.items()):
        xs = sorted(points)
        means = [sum(points[x]) / len(points[x]) for x in xs]
        low = [m - min(points[x]) for x, m in zip(xs, means)]
        high = [max(points[x]) - m for x, m in zip(xs, means)]
        objective = objective_of[label]
        n = same_objective[objective] = same_objective.get(objective, -1) + 1
        # one objective: a color per line; several: the objective's color, a line style per setting
        color = plt.cm.tab10(i % 10) if one_objective else colors[objective]
        ax.errorbar(xs, means, yerr=[low, high], marker=markers[n % len(markers)], capsize=4, linewidth=1.5,
                    linestyle="-" if one_objective else styles[n % len(styles)], color=color, label=label)
        for x in xs:
            ax.scatter([x] * len(points[x]), points[x], s=10, color=color, alpha=0.35, zorder=3)
    counts = {len(v) for points in lines.values() for v in points.values()}
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if counts == {1}:
        spread = "one run per point"
    else:
        spread = (f"mean over {counts.pop()} seeds" if len(counts) == 1 else "mean over seeds") + ", bars = min-max"
    ax.set_title(f"{title} ({spread})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


KNOBS = [(MASK_RATE, "mask_rate", "mask rate (objective.mask_rate)", {"mlm", "span_corruption"}),
         (SPAN_LENGTH, "span_length", "mean span length (objective.mean_span_length)", {"span_corruption"})]
COMPARABLE = [("fixed_loss", "fixed_loss", "fixed-exam loss (eval/fixed/loss)",
               "the family's fixed exam (lower is better; the same masks for every run of a family)"),
              ("probe", "probe", "probe accuracy (eval/probe/accuracy)",
               "the downstream probe's accuracy (higher is better)")]


def make_plots(runs: list[Run], keys: list[str]) -> list[tuple[str, str, bytes]]:
    """[(name, caption, png bytes)]"""
    plots = []
    for key, name in (("val/loss", "val_loss_vs_tokens"), ("train/loss", "train_loss_vs_tokens")):
        png = plot_loss_vs_tokens(runs, keys, key)
        if png:
            plots.append((name, (f"Each run's own {key.split('/')[0]} loss against tokens seen, a colour per setting "
                                 f"(seeds: mean and min-max band; dashed: a run that did not finish): how it trained "
                                 f"on its own exam, not a comparison across settings."), png))
    for axis, name, label in (("train/tokens_seen", "tokens", "tokens seen (train/tokens_seen)"),
                              ("train/flops_seen", "flops", "training FLOPs (train/flops_seen)")):
        png = plot_curves(runs, PROBE, axis, "probe accuracy (eval/probe/accuracy)", label,
                          f"Probe accuracy against {label.split(' (')[0]}", keys)
        if png:
            plots.append((f"probe_vs_{name}", (f"Downstream probe accuracy against {label}, a colour per setting (seeds: "
                                               f"mean and min-max band; a point per evaluation; eval.every_n_validations adds points during "
                                               f"training): objectives compared at equal text or equal compute."),
                          png))
    for x_key, x_name, x_label, objectives in KNOBS:
        for metric, name, y_label, what in COMPARABLE:
            png = plot_metric_vs_knob(runs, keys, x_key, objectives, metric,
                                      f"{y_label.split(' (')[0].capitalize()} against {x_label.split(' (')[0]}",
                                      x_label, y_label)
            if png:
                plots.append((f"{name}_vs_{x_name}", (f"Final {what}, against {x_label}: points are the mean over "
                                                      f"seeds, error bars the min-max over seeds, faint dots the "
                                                      f"single runs."), png))
    return plots
