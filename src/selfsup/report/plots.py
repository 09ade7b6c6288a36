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


def plot_curves(runs: list[Run], y_key: str, x_key: str, ylabel: str, xlabel: str, title: str) -> bytes | None:
    """One line per run of y against x, colored by objective (dashed: a run that did not finish)."""
    curves = [(run, run.curve(y_key, x_key)) for run in runs]
    curves = [(run, points) for run, points in curves if points]
    if not curves:
        return None
    plt = _pyplot()
    colors = _colors(runs)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    labelled = set()
    for run, points in curves:
        xs, ys = zip(*points)
        objective = run.objective or "?"
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.4, color=colors[objective],
                linestyle="-" if run.finished else "--", alpha=0.85,
                label=None if objective in labelled else objective)
        labelled.add(objective)
        if len(curves) <= 12:
            ax.annotate(run.label, (xs[-1], ys[-1]), xytext=(4, 0), textcoords="offset points", fontsize=7,
                        color=colors[objective], va="center")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(title="objective", fontsize=8)
    return _png(fig)


def plot_loss_vs_tokens(runs: list[Run]) -> bytes | None:
    return plot_curves(runs, "val/loss", "train/tokens_seen", "val loss", "tokens seen (train/tokens_seen)",
                       "Validation loss against tokens seen (one line per run)")


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
    png = plot_loss_vs_tokens(runs)
    if png:
        plots.append(("val_loss_vs_tokens", ("Each run's own validation loss against tokens seen, colored by objective "
                                             "(dashed: a run that did not finish): how it trained on its own exam, "
                                             "not a comparison across settings."), png))
    for axis, name, label in (("train/tokens_seen", "tokens", "tokens seen (train/tokens_seen)"),
                              ("train/flops_seen", "flops", "training FLOPs (train/flops_seen)")):
        png = plot_curves(runs, PROBE, axis, "probe accuracy (eval/probe/accuracy)", label,
                          f"Probe accuracy against {label.split(' (')[0]}")
        if png:
            plots.append((f"probe_vs_{name}", (f"Downstream probe accuracy against {label}, one line per run (a point "
                                               f"per evaluation; eval.every_n_validations adds points during "
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
