"""The report's plots (matplotlib, imported only when there is something to plot), as PNG bytes."""

from __future__ import annotations

import io

from selfsup.report.model import (
    MASK_RATE,
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


def plot_loss_vs_tokens(runs: list[Run]) -> bytes | None:
    curves = [(run, run.val_curve()) for run in runs]
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
    ax.set_xlabel("tokens seen (train/tokens_seen)")
    ax.set_ylabel("val loss")
    ax.set_title("Validation loss against tokens seen (one line per run)")
    ax.grid(alpha=0.3)
    ax.legend(title="objective", fontsize=8)
    return _png(fig)


def _group_label(run: Run, keys: list[str]) -> str:
    parts = [run.objective or "?"] + [f"{k.split('.')[-1]}={_show(run.value(k))}" for k in keys
                                      if run.value(k) != "n/a"]
    return ", ".join(parts)


def plot_loss_vs_knob(runs: list[Run], keys: list[str], x_key: str, objectives: set[str], title: str,
                      xlabel: str) -> bytes | None:
    """Val loss against one config value: one line per setting of the other swept values (seed aside),
    points = mean over seeds, bars = min-max over seeds. None when fewer than 2 distinct x values."""
    chosen = [r for r in runs if r.finished and r.objective in objectives and _finite(r.metrics()["val_loss"])
              and _finite(_number(r.config.get(x_key)))]
    if len({_number(r.config.get(x_key)) for r in chosen}) < 2:
        return None
    other = [k for k in keys if k not in (x_key, SEED)]
    lines: dict[str, dict[float, list[float]]] = {}
    objective_of = {}
    for run in chosen:
        label = _group_label(run, other)
        lines.setdefault(label, {}).setdefault(_number(run.config[x_key]), []).append(run.metrics()["val_loss"])
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
    ax.set_ylabel("final val loss")
    if counts == {1}:
        spread = "one run per point"
    else:
        spread = (f"mean over {counts.pop()} seeds" if len(counts) == 1 else "mean over seeds") + ", bars = min-max"
    ax.set_title(f"{title} ({spread})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def make_plots(runs: list[Run], keys: list[str]) -> list[tuple[str, str, bytes]]:
    """[(name, caption, png bytes)]"""
    plots = []
    png = plot_loss_vs_tokens(runs)
    if png:
        plots.append(("val_loss_vs_tokens", ("Validation loss against tokens seen, one line per run, colored by "
                                             "objective (dashed: a run that did not finish)."), png))
    png = plot_loss_vs_knob(runs, keys, MASK_RATE, {"mlm", "span_corruption"}, "Val loss against mask rate",
                            "mask rate (objective.mask_rate)")
    if png:
        plots.append(("val_loss_vs_mask_rate", ("Final validation loss against mask rate, per objective: points are "
                                                "the mean over seeds, error bars the min-max over seeds, faint dots "
                                                "the single runs. Compare within one objective only (see below)."),
                      png))
    png = plot_loss_vs_knob(runs, keys, SPAN_LENGTH, {"span_corruption"}, "Val loss against mean span length",
                            "mean span length (objective.mean_span_length)")
    if png:
        plots.append(("val_loss_vs_span_length", ("Final validation loss of span-corruption runs against mean span "
                                                  "length, one line per mask rate: points are the mean over seeds, "
                                                  "error bars the min-max. (UL2 sets its span lengths in "
                                                  "objective.denoisers, so it is not on this plot.)"), png))
    return plots
