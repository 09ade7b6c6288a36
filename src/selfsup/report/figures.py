"""The report's figures, drawn with matplotlib: curves, a metric by knob or setting, a study's history; as PNG."""

from __future__ import annotations

import io

from selfsup.report.model import SEED, ReportError, Run, _finite, _number
from selfsup.report.plot_data import (
    METRIC_KEYS,
    baselines,
    curve_series,
    run_point,
    setting_colors,
    setting_of,
    trial_baseline,
)
from selfsup.results.groups import setting_label


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


BASELINE_STYLE = {
    "random_init": ("#555555", "--"),
    "majority": ("#000000", ":"),
    "unigram": ("#8c564b", "-."),
    "bigram": ("#e377c2", (0, (1, 1))),
}


def draw_baselines(ax, found: list[dict], spans: dict | None = None) -> None:
    """Horizontal lines (random-init: its mean, and a +- sd band), labelled for the legend; with `spans`
    ({architecture: [x ranges]}, a plot by setting), each only over its architecture's settings. Their
    artists' gid is `baseline:<kind>`."""
    shades = ["#555555", "#999999", "#222222", "#777777"]
    archs = list(dict.fromkeys(b["architecture"] for b in found))
    for b in found:
        color, style = BASELINE_STYLE[b["kind"]]
        if b["kind"] == "random_init" and b["architecture"] is not None:
            color = shades[archs.index(b["architecture"]) % len(shades)]
        ranges = (spans or {}).get(b["architecture"]) or [None]
        for i, where in enumerate(ranges):
            label = b["label"] if i == 0 else None
            if where is None:
                line = ax.axhline(b["y"], color=color, linestyle=style, linewidth=1.2, label=label, zorder=1)
            else:
                [line] = ax.plot(
                    where, [b["y"]] * 2, color=color, linestyle=style, linewidth=1.5, label=label, zorder=1
                )
            line.set_gid(f"baseline:{b['kind']}")
            if b["sd"]:
                low, high = b["y"] - b["sd"], b["y"] + b["sd"]
                alpha = 0.12 if len(archs) == 1 or where is not None else 0.06  # overlapping bands: fainter
                band = (
                    ax.axhspan(low, high, color=color, alpha=alpha, zorder=0)
                    if where is None
                    else ax.fill_between(where, [low] * 2, [high] * 2, color=color, alpha=alpha, zorder=0)
                )
                band.set_gid(f"baseline:{b['kind']}:band")


def outside_legend(ax, fontsize: int = 7) -> None:
    """The legend beside the axes, to their right, so that it covers no data."""
    ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)


def curves_figure(
    runs: list[Run],
    y_key: str,
    x_key: str,
    ylabel: str,
    xlabel: str,
    title: str,
    keys: list[str] | None = None,
    with_baselines: bool = False,
):
    """y against x (`curve_series`) and the series it left out (a single point: no curve), or (None, left out)
    when no series has two points."""
    series = curve_series(runs, y_key, x_key, keys)
    drawn = [s for s in series if len(s["x"]) > 1]
    left_out = [s["label"] or s["setting"] for s in series if len(s["x"]) <= 1]
    if not drawn:
        return None, left_out
    plt = _pyplot()
    colors = setting_colors(runs, keys or [])
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for line in drawn:
        color = colors[line["setting"]]
        ax.plot(
            line["x"],
            line["y"],
            marker="o",
            markersize=3,
            linewidth=1.5,
            color=color,
            linestyle="--" if line["dashed"] else "-",
            alpha=0.9,
            label=line["label"],
            zorder=3,
        )
        if line["low"] is not None:
            ax.fill_between(line["x"], line["low"], line["high"], color=color, alpha=0.2, zorder=2)
    if with_baselines:
        draw_baselines(ax, baselines(runs, y_key))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    outside_legend(ax)
    return fig, left_out


def study_history_figure(study):
    """The optimisation history of a study (None under two complete trials): each complete trial's value, with
    its standard error (user attr value_se) as error bars where known, the best so far, the pruned trials, and
    the trials' random-init (mean, +- sd band) where known."""
    from optuna.trial import TrialState

    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    if len(complete) < 2:
        return None
    plt = _pyplot()
    maximize = study.direction.name == "MAXIMIZE"
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    numbers, values = [t.number for t in complete], [t.value for t in complete]
    best = [max(values[: i + 1]) if maximize else min(values[: i + 1]) for i in range(len(values))]
    se = [_number(t.user_attrs.get("value_se")) for t in complete]
    if any(_finite(v) for v in se):
        errors = [v if _finite(v) else 0.0 for v in se]
        bars = ax.errorbar(
            numbers,
            values,
            yerr=errors,
            fmt="o",
            markersize=4,
            capsize=3,
            color="#1f77b4",
            label="trial value (± its standard error)",
            zorder=3,
        )
        bars[0].set_gid("trial_value")
    else:
        ax.scatter(numbers, values, s=18, color="#1f77b4", label="trial value", zorder=3).set_gid("trial_value")
    ax.step(numbers, best, where="post", color="#d62728", label="best so far", zorder=3)
    known = [(t.number, found) for t in complete if (found := trial_baseline(t)) is not None]
    if known:
        xs, ys = [n for n, _ in known], [b[0] for _, b in known]
        label = "random-init (mean ± sd)" if all(b[1] is not None for _, b in known) else "random-init"
        if len({round(y, 9) for y in ys}) == 1:  # one baseline for every trial: a line across the plot
            draw_baselines(
                ax, [{"kind": "random_init", "architecture": None, "label": label, "y": ys[0], "sd": known[0][1][1]}]
            )
        else:
            [line] = ax.plot(
                xs, ys, color="#555555", linestyle="--", linewidth=1.2, drawstyle="steps-mid", label=label, zorder=1
            )
            line.set_gid("baseline:random_init")
            if all(b[1] is not None for _, b in known):
                ax.fill_between(
                    xs,
                    [y - b[1] for (_, b), y in zip(known, ys)],
                    [y + b[1] for (_, b), y in zip(known, ys)],
                    step="mid",
                    color="#555555",
                    alpha=0.12,
                    zorder=0,
                ).set_gid("baseline:random_init:band")
    pruned = [t.number for t in study.trials if t.state == TrialState.PRUNED]
    if pruned:
        ax.scatter(
            pruned, [min(values)] * len(pruned), marker="x", color="#7f7f7f", label="pruned (at the lowest value)"
        )
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("trial")
    ax.set_ylabel("objective value")
    ax.set_title(f"Optuna study {study.study_name}: optimisation history")
    ax.grid(alpha=0.3)
    outside_legend(ax, 8)
    return fig


def draw_runs(ax, points: list[tuple[float, Run]], metric: str, color: str, label: str | None) -> None:
    """Each run at its x: its value with its 95% interval as whiskers (its marker's gid: `interval`)."""
    for x, run in points:
        value, low, high = run_point(run, metric)
        bars = ax.errorbar(
            [x], [value], yerr=[[value - low], [high - value]], marker="o", markersize=4, capsize=3,
            linestyle="none", color=color, alpha=0.8, zorder=3, label=label,
        )  # fmt: skip
        bars.lines[0].set_gid("interval")
        label = None


def knob_figure(
    runs: list[Run],
    keys: list[str],
    x_key: str,
    objectives: set[str],
    metric: str,
    title: str,
    xlabel: str,
    ylabel: str,
):
    """A final metric (a key of Run.metrics()) against one config value: each run a point with its 95% interval
    (the verdict's) as whiskers, in its setting's colour (setting_colors), a grey line through the means over
    seeds of each line of the other swept values (seed aside), and the metric's baselines (None when fewer than
    2 distinct x values); and whether it is a scatter: when the other swept values differ from run to run (an
    Optuna study's sampled values: every line would be one point), no line joins them."""
    chosen = [
        r
        for r in runs
        if r.finished
        and r.objective in objectives
        and _finite(r.metrics()[metric])
        and _finite(_number(r.config.get(x_key)))
    ]
    if len({_number(r.config.get(x_key)) for r in chosen}) < 2:
        return None, False
    other = [k for k in keys if k not in (x_key, SEED)]
    lines: dict[str, dict[float, list[float]]] = {}
    for run in chosen:
        label = setting_label(run.as_summary_row(other))
        lines.setdefault(label, {}).setdefault(_number(run.config[x_key]), []).append(run.metrics()[metric])
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    scattered = any(len(points) < 2 for points in lines.values())
    colors = setting_colors(runs, keys)
    if not scattered:
        for points in lines.values():
            xs = sorted(points)
            ax.plot(xs, [sum(points[x]) / len(points[x]) for x in xs], color="#888888", linewidth=1.2, zorder=2)
    settings: dict[str, list[Run]] = {}
    for run in chosen:
        settings.setdefault(setting_of(run, keys), []).append(run)
    xs = [_number(r.config[x_key]) for r in chosen]
    step = 0.012 * (max(xs) - min(xs))  # the seeds of a setting side by side, not on top of each other
    for label, members in settings.items():
        shown = label if not scattered or len(settings) <= 10 else None
        at = [_number(r.config[x_key]) for r in members]
        offsets = [(j - (len(members) - 1) / 2) * step if at.count(x) > 1 else 0.0 for j, x in enumerate(at)]
        draw_runs(ax, [(x + o, r) for x, o, r in zip(at, offsets, members)], metric, colors[label], shown)
    draw_baselines(ax, baselines(chosen, METRIC_KEYS[metric]))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    outside_legend(ax, 8)
    return fig, scattered


def setting_figure(runs: list[Run], keys: list[str], metric: str, title: str, ylabel: str):
    """A final metric per setting (objective and swept values, seed aside), the x axis the settings: each run a
    point with its 95% interval (the verdict's) as whiskers, side by side, in its setting's colour, and over each
    setting its architecture's baselines. None unless two objectives or more have it."""
    chosen = [r for r in runs if r.finished and _finite(r.metrics()[metric])]
    if len({r.objective for r in chosen}) < 2:
        return None
    groups: dict[str, list[Run]] = {}
    for run in chosen:
        groups.setdefault(setting_of(run, keys), []).append(run)
    plt = _pyplot()
    colors = setting_colors(runs, keys)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    spans: dict[str | None, list] = {}
    for i, (label, members) in enumerate(groups.items()):
        offsets = [0.0] if len(members) == 1 else [-0.2 + 0.4 * j / (len(members) - 1) for j in range(len(members))]
        draw_runs(ax, [(i + o, r) for o, r in zip(offsets, members)], metric, colors[label], None)
        spans.setdefault(members[0].architecture or "?", []).append([i - 0.4, i + 0.4])
    found = baselines(chosen, METRIC_KEYS[metric])
    if any(b["architecture"] is None for b in found):  # the same for every architecture: over every setting
        spans[None] = [[i - 0.4, i + 0.4] for i in range(len(groups))]
    draw_baselines(ax, found, spans)
    ax.set_xticks(range(len(groups)), list(groups), rotation=20, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    if found:
        outside_legend(ax, 8)
    return fig


def confusion_figure(task: str, results: list[tuple[str, dict]], most: int = 6):
    """A task's confusion matrices, one panel per run (the first `most`): each row the share of a true class's test
    examples predicted as each class (summed over fine-tuning seeds)."""
    import numpy as np

    plt = _pyplot()
    shown = results[:most]
    fig, axes = plt.subplots(1, len(shown), figsize=(3.4 * len(shown) + 0.6, 3.4), squeeze=False)
    for ax, (label, r) in zip(axes[0], shown):
        matrix = np.asarray(r["confusion"], dtype=float)
        share = matrix / np.maximum(matrix.sum(1, keepdims=True), 1)
        ax.imshow(share, vmin=0, vmax=1, cmap="Blues")
        classes = [str(c)[:12] for c in r["classes"]]
        ax.set_xticks(range(len(classes)), classes, rotation=90, fontsize=7)
        ax.set_yticks(range(len(classes)), classes, fontsize=7)
        ax.set_xlabel("predicted", fontsize=8)
        ax.set_ylabel("true", fontsize=8)
        ax.set_title(f"{task}, run {label}", fontsize=8)
        if len(classes) <= 10:
            for i in range(len(classes)):
                for j in range(len(classes)):
                    ax.text(j, i, f"{share[i, j]:.2f}", ha="center", va="center", fontsize=6,
                            color="white" if share[i, j] > 0.5 else "black")  # fmt: skip
    fig.tight_layout()
    return fig
